package measure_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// hostileTimeout is the per-exchange timeout against hostile servers. An exchange ends
// on it, not on measure.DefaultTimeout (what tooLate tells apart); how far past its
// deadline it ends, on the wall clock, is BenchmarkHostileMemory's figure ("time past the
// deadline by phase"): a bound near the timeout tests the scheduler of a loaded machine.
const hostileTimeout = 800 * time.Millisecond

// tooLate says whether an exchange with the hostile timeout took as long as the default
// timeout: it ended on some other deadline than its own.
func tooLate(took time.Duration) bool { return took >= measure.DefaultTimeout }

// expected classification of each hostile behaviour per protocol. DoH has no "wrong
// length" (HTTP frames the body): the test server answers 503 there instead.
func expected(p measure.Protocol, b hostile.Behaviour) measure.Status {
	switch b {
	case hostile.Stall:
		return measure.StatusTimeout
	case hostile.Reset:
		if p == measure.DoUDP {
			return measure.StatusBadResponse // UDP has no reset: a truncated message
		}
		return measure.StatusReset
	case hostile.WrongLength:
		if p == measure.DoH || p == measure.DoH3 {
			return measure.StatusHTTPError
		}
	case hostile.Flood:
		if p == measure.DoUDP {
			return measure.StatusBadResponse // only garbage datagrams until the deadline
		}
		return measure.StatusTimeout // the answer never completes
	}
	return measure.StatusBadResponse
}

func TestHostileServersAreClassified(t *testing.T) {
	for i, b := range measuretest.Behaviors {
		s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.4", Behavior: b})
		_ = i
		for _, p := range measure.Protocols {
			t.Run(string(b)+"/"+string(p), func(t *testing.T) {
				t.Parallel()
				m, _ := measure.For(p)
				req := s.Request(p)
				req.Timeout = hostileTimeout
				begin := time.Now()
				res := m.Measure(context.Background(), req)
				took := time.Since(begin)
				if want := expected(p, b); res.Status != want {
					t.Errorf("status %s (%v), want %s", res.Status, res.Err, want)
				}
				if res.Status != measure.StatusOK && res.Err == nil {
					t.Error("failure without an error detail")
				}
				if tooLate(took) {
					t.Errorf("took %v with a timeout of %v: it ended on another deadline", took, hostileTimeout)
				}
			})
		}
	}
}

// TestFloodBoundsTheQlog: a server that floods a QUIC connection with packets (DoQ: a
// message one byte per packet; DoH3: unknown HTTP/3 frames as fast as flow control
// allows, each a qlog record of its own) leaves a qlog cut at measure.QlogLimit and
// marked truncated, whose analysis still explains the handshake (it completed before
// the flood) and says truncated; the exchange is classified as a timeout, and its
// finishing (closing, collecting and parsing the qlog) begins at its deadline. What
// finishing costs is CPU work on at most QlogLimit bytes (5-10 times slower under the
// race detector): BenchmarkHostileMemory prints it; this test checks the bound itself.
// The timeout is long enough for either flood to pass the bound several times over on
// a loaded machine (DoH3 ~20 MB per second, DoQ ~0.6 MB per second here unbounded).
func TestFloodBoundsTheQlog(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.6", Behavior: hostile.Flood})
	for _, p := range []measure.Protocol{measure.DoQ, measure.DoH3} {
		t.Run(string(p), func(t *testing.T) {
			m, _ := measure.For(p)
			req := s.Request(p)
			req.Timeout = 2 * time.Second
			var finishBegan time.Time
			var finishing time.Duration
			restore := measure.SetFinishPhases(func(_ *measure.Result, began time.Time, closing, qlogWait, analysis time.Duration) {
				finishBegan, finishing = began, closing+qlogWait+analysis
			})
			defer restore()
			begin := time.Now()
			res := m.Measure(context.Background(), req)
			took := time.Since(begin)
			if res.Status != measure.StatusTimeout {
				t.Errorf("status %s (%v), want timeout", res.Status, res.Err)
			}
			if len(res.Qlog) > measure.QlogLimit || !res.QlogTruncated {
				t.Errorf("qlog %d bytes (limit %d), truncated %v", len(res.Qlog), measure.QlogLimit, res.QlogTruncated)
			}
			if len(res.Qlog) < measure.QlogLimit/2 {
				t.Errorf("qlog %d bytes: cut far below the limit %d", len(res.Qlog), measure.QlogLimit)
			}
			if a := res.QlogAnalysis; a == nil || !a.Truncated || a.HandshakeNS <= 0 || a.Cause != qlogana.Cause1RTT {
				t.Errorf("analysis %+v, want a truncated trace with a 1-RTT handshake", a)
			}
			// The exchange itself ends at its deadline: finishing begins within the
			// scheduling slack of it, whatever the flood.
			if finishBegan.IsZero() {
				t.Fatal("finishing the QUIC exchange was never reported")
			}
			if ended := finishBegan.Sub(begin); tooLate(ended) {
				t.Errorf("the exchange ended %v after it began, timeout %v: on another deadline", ended, req.Timeout)
			}
			t.Logf("took %v: exchange %v, finishing %v (qlog %d bytes)", took, finishBegan.Sub(begin), finishing, len(res.Qlog))
		})
	}
}

// TestHostileHTTPServersAreClassified: the HTTP servers' own hostile behaviours get one
// status over HTTP/2 and HTTP/3: a body dripped past the deadline is a timeout (HTTP/3's
// client cancels the stream with H3_REQUEST_CANCELLED when the request's context ends:
// that is our deadline, not a reset by the server), and a HEADERS frame longer than
// the client takes is a bad response (HTTP/2's client refuses the frame, HTTP/3's the
// header block: both a malformed reply).
func TestHostileHTTPServersAreClassified(t *testing.T) {
	want := map[hostile.Behaviour]measure.Status{
		hostile.Drip:        measure.StatusTimeout,
		hostile.HugeHeaders: measure.StatusBadResponse,
	}
	for i, b := range measuretest.HTTPBehaviors {
		s := measuretest.Start(t, measuretest.Config{Host: fmt.Sprintf("127.0.0.%d", 40+i), Behavior: b})
		for _, p := range []measure.Protocol{measure.DoH, measure.DoH3} {
			for _, v := range []string{measure.VariantGET, measure.VariantPOST} {
				t.Run(string(b)+"/"+string(p)+"/"+v, func(t *testing.T) {
					t.Parallel()
					m, _ := measure.For(p)
					req := s.Request(p)
					req.Timeout, req.Variant = hostileTimeout, v
					res := m.Measure(context.Background(), req)
					if res.Status != want[b] {
						t.Errorf("status %s (%v), want %s", res.Status, res.Err, want[b])
					}
				})
			}
		}
	}
}

// TestOneTimeoutOneText: an exchange that runs out of time is stored with one text per
// step, whatever ended it: the context's deadline, a socket's deadline, quic-go's
// handshake or idle timeout (here a server whose idle timeout is shorter than the
// client's timeout), HTTP/3's cancelled stream. Handshake: nothing answers the
// ClientHello or the Initial. Answer: stalling, flooding and dripping servers.
func TestOneTimeoutOneText(t *testing.T) {
	stall := measuretest.Start(t, measuretest.Config{Host: "127.0.0.44", Behavior: hostile.Stall})
	idle := measuretest.Start(t, measuretest.Config{Host: "127.0.0.45", Behavior: hostile.Stall, IdleTimeout: 150 * time.Millisecond})
	flood := measuretest.Start(t, measuretest.Config{Host: "127.0.0.46", Behavior: hostile.Flood})
	drip := measuretest.Start(t, measuretest.Config{Host: "127.0.0.47", Behavior: hostile.Drip})
	silentUDP, err := net.ListenPacket("udp", "127.0.0.48:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silentUDP.Close()
	silentTCP, err := net.Listen("tcp", "127.0.0.48:0") // never accepts: connects, never speaks TLS
	if err != nil {
		t.Fatal(err)
	}
	defer silentTCP.Close()
	type exchange struct {
		name string
		p    measure.Protocol
		addr netip.AddrPort
	}
	steps := map[string][]exchange{
		"handshake": {
			{"silent", measure.DoQ, measure.AddrPortOf(silentUDP.LocalAddr())},
			{"silent", measure.DoH3, measure.AddrPortOf(silentUDP.LocalAddr())},
			{"silent", measure.DoT, measure.AddrPortOf(silentTCP.Addr())},
			{"silent", measure.DoH, measure.AddrPortOf(silentTCP.Addr())},
		},
	}
	for _, p := range measure.Protocols {
		steps["answer"] = append(steps["answer"], exchange{"stall", p, stall.Request(p).Addr})
		if p != measure.DoUDP { // garbage datagrams until the deadline: bad-response
			steps["answer"] = append(steps["answer"], exchange{"flood", p, flood.Request(p).Addr})
		}
	}
	for _, p := range []measure.Protocol{measure.DoQ, measure.DoH3} {
		steps["answer"] = append(steps["answer"], exchange{"server idle timeout", p, idle.Request(p).Addr})
	}
	for _, p := range []measure.Protocol{measure.DoH, measure.DoH3} {
		steps["answer"] = append(steps["answer"], exchange{"drip", p, drip.Request(p).Addr})
	}
	for step, exchanges := range steps {
		texts := map[string][]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, x := range exchanges {
			wg.Go(func() {
				m, _ := measure.For(x.p)
				res := m.Measure(context.Background(), &measure.Request{Addr: x.addr, Timeout: hostileTimeout, KeyShare: measure.KeyShareX25519})
				if res.Status != measure.StatusTimeout || res.Err == nil {
					t.Errorf("%s: %s %s: %s (%v), want timeout", step, x.name, x.p, res.Status, res.Err)
					return
				}
				mu.Lock()
				texts[res.Err.Error()] = append(texts[res.Err.Error()], x.name+" "+string(x.p))
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(texts) != 1 {
			t.Errorf("%s: a timeout has %d texts, want one: %q", step, len(texts), texts)
		}
		for text := range texts {
			t.Logf("%s: %q", step, text)
		}
	}
}

func TestRefused(t *testing.T) {
	for _, p := range []measure.Protocol{measure.DoUDP, measure.DoTCP, measure.DoT, measure.DoH} {
		network := "tcp"
		if p == measure.DoUDP {
			network = "udp"
		}
		m, _ := measure.For(p)
		res := m.Measure(context.Background(), &measure.Request{Addr: measuretest.UnusedPort(t, network, "127.0.0.5"), Timeout: time.Second})
		if res.Status != measure.StatusConnRefused {
			t.Errorf("%s: %s %v", p, res.Status, res.Err)
		}
	}
	// QUIC to a closed port: the ICMP error reaches quic-go, which keeps trying until
	// the handshake timeout; either classification is honest.
	for _, p := range []measure.Protocol{measure.DoQ, measure.DoH3} {
		m, _ := measure.For(p)
		res := m.Measure(context.Background(), &measure.Request{Addr: measuretest.UnusedPort(t, "udp", "127.0.0.5"), Timeout: 500 * time.Millisecond})
		if res.Status != measure.StatusConnRefused && res.Status != measure.StatusTimeout {
			t.Errorf("%s: %s %v", p, res.Status, res.Err)
		}
	}
}

func TestALPNMismatch(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.5"})
	m, _ := measure.For(measure.DoQ)
	res := m.Measure(context.Background(), &measure.Request{Addr: s.DoQ, ALPN: []string{"doq-i02"}, Timeout: time.Second})
	if res.Status != measure.StatusALPNMismatch {
		t.Errorf("%s %v", res.Status, res.Err)
	}
}
