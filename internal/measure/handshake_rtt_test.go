package measure

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quic-go/quic-go/testutils/simnet"

	"github.com/doqscan/doqscan/internal/kstamp"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/simquic"
)

// simRTT is the round trip of the in-process link: below population.ClientInitialPTO, so
// an amplification stall costs a round trip, not a probe timeout.
const simRTT = 100 * time.Millisecond

// simLink is an in-process path (quic-go's testutils/simnet, fixed latency simRTT/2 each
// way, the testbed's 1500-byte MTU) between a simquic server at srv and n client sockets,
// handed out in order by listen, one per connection (a new socket, as the measurement
// opens). Run it inside a synctest bubble: time is then fake and every round trip exact.
type simLink struct {
	net     *simnet.Simnet
	server  *simnet.SimConn
	clients []*simnet.SimConn
	used    int
}

func newSimLink(t *testing.T, srv netip.AddrPort, n int) *simLink {
	t.Helper()
	settings := simnet.NodeBiDiLinkSettings{
		Latency:  simRTT / 2,
		Downlink: simnet.LinkSettings{MTU: 1500},
		Uplink:   simnet.LinkSettings{MTU: 1500},
	}
	l := &simLink{net: &simnet.Simnet{Router: &simnet.PerfectRouter{}}}
	l.server = l.net.NewEndpoint(net.UDPAddrFromAddrPort(srv), settings)
	for i := range n {
		a := netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), uint16(40000+i))
		l.clients = append(l.clients, l.net.NewEndpoint(net.UDPAddrFromAddrPort(a), settings))
	}
	if err := l.net.Start(); err != nil {
		t.Fatal(err)
	}
	return l
}

// listen is a Request.listenPacket: the next client socket, without kernel timestamps.
func (l *simLink) listen(netip.AddrPort) (net.PacketConn, *kstamp.Log, error) {
	if l.used == len(l.clients) {
		return nil, nil, fmt.Errorf("simLink: all %d client sockets used", len(l.clients))
	}
	l.used++
	return l.clients[l.used-1], &kstamp.Log{}, nil
}

func (l *simLink) close(t *testing.T) {
	for _, c := range l.clients {
		_ = c.Close()
	}
	if err := l.net.Close(); err != nil {
		t.Error(err)
	}
}

// wantCause is the qlogana cause of the population's ground truth for phase.
func wantCause(pop *population.Population, r *population.Record, port uint16, phase string, client population.ClientHello) string {
	a := r.Prefix.Addr()
	tokenValid := phase == population.PhaseMeasured && r.Token == population.TokenHonour
	var causes []string
	if phase != population.PhaseMeasured && pop.ExpectVerify(a, port).NeedsVN {
		causes = append(causes, qlogana.CauseVersionNegotiation)
	}
	if r.Retries(population.ProtoDoQ, phase) && !tokenValid {
		causes = append(causes, qlogana.CauseRetry)
	}
	if pop.Stalls(a, port, population.ProtoDoQ, phase, client) {
		causes = append(causes, qlogana.CauseAmplification)
	}
	switch len(causes) {
	case 0:
		return qlogana.Cause1RTT
	case 1:
		return causes[0]
	}
	return qlogana.CauseMultiple
}

// wantRTTs is the ground truth's round trips (population.HandshakeRTTs) and whether the
// server's last flight is paced, i.e. population.HandshakeTime adds pacing to them: the
// address is validated (no stall) and the flight exceeds quic-go's pacer burst.
func wantRTTs(t *testing.T, pop *population.Population, r *population.Record, port uint16, phase string,
	client population.ClientHello) (n int, paced bool, model time.Duration) {
	t.Helper()
	a := r.Prefix.Addr()
	n, ok := pop.HandshakeRTTs(a, port, population.ProtoDoQ, phase, client)
	if !ok {
		t.Fatalf("%s: no DoQ handshake in the ground truth", r.Class)
	}
	d, _ := pop.HandshakeTime(a, port, population.ProtoDoQ, phase, client)
	if pop.Stalls(a, port, population.ProtoDoQ, phase, client) {
		return n, false, 0
	}
	model = d - time.Duration(n)*pop.PathOf(a).RTT
	return n, model > 0, model
}

// TestHandshakeRoundTripsSimnet runs the measurement client (measure.For(DoQ)) against
// simquic's behaviours over an in-process link under testing/synctest, where time is
// fake: the handshake of the warm-up (no token, no known version) and of the measured
// exchange (the warm-up's token, version and, in the resumed and 0-RTT modes, session
// ticket) must take exactly the ground truth's round trips (population.HandshakeRTTs)
// times the link's RTT, plus the pacing of a long flight (population.HandshakeTime), with
// no tolerance, and qlogana must give the ground truth's cause. The namespace testbed
// (e2e) checks the same classes with real timing.
func TestHandshakeRoundTripsSimnet(t *testing.T) {
	// The in-process sockets have no buffers to size.
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	pop, err := population.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	p, err := pki.New(pop)
	if err != nil {
		t.Fatal(err)
	}
	clients := map[KeyShare]population.ClientHello{
		KeyShareX25519: population.ClientX25519,
		KeyShareMLKEM:  population.ClientMLKEM,
	}
	classes := []string{"doq", "doq-retry", "doq-v2only", "doq-bigchain-honour", "doq-bigchain-ignore",
		"doq-midchain-honour", "doq-midchain-ignore"}
	for _, class := range classes {
		rs := pop.ByClass(class)
		if len(rs) == 0 {
			t.Fatalf("population has no %s", class)
		}
		r := rs[0]
		port := r.QUICPorts[0]
		for _, ks := range []KeyShare{KeyShareX25519, KeyShareMLKEM} {
			t.Run(class+"/"+string(ks), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					simHandshakes(t, pop, p, r, port, ks, clients[ks])
				})
			})
		}
	}
}

func simHandshakes(t *testing.T, pop *population.Population, p *pki.PKI, r *population.Record, port uint16,
	ks KeyShare, client population.ClientHello) {
	addr := netip.AddrPortFrom(r.Prefix.Addr(), port)
	// As the campaign runs them: per mode a new Peer, a warm-up (the resumed and 0-RTT
	// modes' warm-up obtains the session ticket) and the measured exchange.
	units := []struct{ warm, meas Mode }{
		{ModeFresh, ModeFresh}, {ModeResumed, ModeResumed}, {ModeResumed, Mode0RTT},
	}
	link := newSimLink(t, addr, 2*len(units))
	defer link.close(t)
	srv, err := simquic.ServeConn(t.Context(), simquic.Config{Population: pop, PKI: p}, link.server, addr.Addr(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	m, err := For(DoQ)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range units {
		peer := NewPeer()
		for _, x := range []struct {
			phase string
			mode  Mode
		}{{population.PhaseWarmup, u.warm}, {population.PhaseMeasured, u.meas}} {
			req := &Request{Addr: addr, Mode: x.mode, KeyShare: ks, Peer: peer, ALPN: r.ALPNsOn(port)[:1],
				listenPacket: link.listen}
			checkSimExchange(t, pop, r, port, client, x.phase, x.mode, m.Measure(context.Background(), req))
		}
	}
}

// checkSimExchange checks one exchange's handshake and query against the ground truth.
func checkSimExchange(t *testing.T, pop *population.Population, r *population.Record, port uint16,
	client population.ClientHello, phase string, mode Mode, res *Result) {
	t.Helper()
	name := phase + " " + string(mode)
	if res.Status != StatusOK {
		t.Fatalf("%s: status %s: %v", name, res.Status, res.Err)
	}
	a := res.QlogAnalysis
	if a == nil || len(a.Flights) == 0 {
		t.Fatalf("%s: no qlog analysis, or no server flight in it", name)
	}
	wantN, paced, model := wantRTTs(t, pop, r, port, phase, client)
	wantC := wantCause(pop, r, port, phase, client)
	// A resumed handshake (RFC 8446 §2.2) sends no Certificate: its flight neither
	// stalls at the anti-amplification limit nor is long enough to be paced, which
	// population.HandshakeRTTs (per phase, not per mode) does not model.
	if phase == population.PhaseMeasured && mode != ModeFresh {
		if pop.Stalls(r.Prefix.Addr(), port, population.ProtoDoQ, phase, client) {
			wantN--
			wantC = qlogana.Cause1RTT
		}
		paced = false
	}
	last := a.Flights[len(a.Flights)-1]
	spread := time.Duration(last.EndNS - last.StartNS) // the pacing of the last flight
	want := time.Duration(wantN)*simRTT + spread
	t.Logf("%s: handshake %v (wall %v), %d round trips, cause %s, last flight paced over %v (model %v); resolve %v",
		name, res.Handshake, res.HandshakeWall, a.RoundTrips, a.Cause, spread, model, res.Queries[0].Resolve)
	if paced != (spread > 0) {
		t.Errorf("%s: last flight spread over %v; the ground truth paces it: %v", name, spread, paced)
	}
	if !res.HasHandshake || res.Handshake != want {
		t.Errorf("%s: handshake %v (has %v), want %d x %v + %v = %v", name, res.Handshake, res.HasHandshake,
			wantN, simRTT, spread, want)
	}
	if mode != Mode0RTT && res.HandshakeWall != want {
		t.Errorf("%s: wall-clock handshake %v, want %v", name, res.HandshakeWall, want)
	}
	if a.RoundTrips != wantN {
		t.Errorf("%s: qlogana counts %d round trips, want %d", name, a.RoundTrips, wantN)
	}
	if a.Cause != wantC {
		t.Errorf("%s: cause %s, want %s", name, a.Cause, wantC)
	}
	tokenValid := phase == population.PhaseMeasured && r.Token == population.TokenHonour
	if a.Retry != (r.Retries(population.ProtoDoQ, phase) && !tokenValid) {
		t.Errorf("%s: qlog Retry %v (retry=%v token=%s)", name, a.Retry, r.Retry, r.Token)
	}
	if phase == population.PhaseMeasured && (res.TokenUsed == nil || !*res.TokenUsed) {
		t.Errorf("%s: the warm-up's NEW_TOKEN token was not presented", name)
	}
	// The query follows the handshake and takes one round trip. With 0-RTT it leaves with
	// the first flight, but simquic serves streams only once the handshake is complete on
	// its side (our Finished arrives half a round trip after our handshake completes):
	// the answer comes one round trip after the handshake, two after the query.
	wantResolve := simRTT
	if mode == Mode0RTT {
		wantResolve = 2 * simRTT
	}
	if q := res.Queries[0]; q.Resolve != wantResolve {
		t.Errorf("%s: resolve %v, want %v", name, q.Resolve, wantResolve)
	}
	if phase == population.PhaseMeasured {
		if mode == ModeResumed && (res.Resumed == nil || !*res.Resumed) {
			t.Errorf("%s: session not resumed", name)
		}
		if mode == Mode0RTT && (res.Used0RTT == nil || !*res.Used0RTT) {
			t.Errorf("%s: 0-RTT not used", name)
		}
	}
}
