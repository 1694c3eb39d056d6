// Package rtt measures the round-trip time to a resolver's port with the transport its
// measurement used (the study's Sect. 2): UDP (a random payload from a random source
// port; any reply or an ICMP port unreachable ends it), TCP (a SYN with a random sequence
// number on a raw socket; SYN-ACK or RST ends it and the connection is never completed)
// and QUIC (a Version Negotiation probe: a 1200-byte Initial-shaped packet with a
// reserved version, RFC 9000 §6 and §15).
package rtt

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/doqscan/doqscan/internal/kstamp"
	"github.com/doqscan/doqscan/internal/outcome"
)

// Transport names, as in schema.sql rtt_samples.transport.
type Transport string

const (
	UDP  Transport = "udp"
	TCP  Transport = "tcp"
	QUIC Transport = "quic"
)

// Status is the outcome of one sample (rtt_samples.status).
type Status string

// Sample statuses. A closed port is conn-refused, as in measurements.status (migration
// 0010 rewrote the earlier 'rst' and 'icmp'); the transport says how it refused.
const (
	StatusOK          Status = "ok"           // a reply (SYN-ACK, VN, any UDP datagram)
	StatusTimeout     Status = "timeout"      // nothing within the timeout
	StatusConnRefused Status = "conn-refused" // TCP RST or ICMP port unreachable: the port is closed, the path answered
	StatusError       Status = "error"        // the probe could not be sent or read (detail says why)
)

// Statuses is the table of sample statuses.
var Statuses = outcome.Table[Status]{
	{Status: StatusOK, Meaning: "a reply: SYN-ACK (tcp), a Version Negotiation packet (quic), any datagram (udp)"},
	{Status: StatusTimeout, Meaning: "nothing within the timeout"},
	{Status: StatusConnRefused, Meaning: "the port is closed and the path answered: TCP RST (tcp), ICMP port unreachable (udp, quic); the RTT is valid"},
	{Status: StatusError, Meaning: "the probe could not be sent or its reply read (no raw socket, bad source address); the detail says why"},
}

// Classify maps the error of sending or reading a probe to a status: a status the
// error carries (outcome.Error[Status]), else ECONNREFUSED (ICMP port unreachable) is
// conn-refused, a deadline is timeout, anything else error; nil is ok.
func Classify(err error) Status {
	if err == nil {
		return StatusOK
	}
	if s, ok := outcome.TryGet[Status](err); ok {
		return s
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return StatusConnRefused
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return StatusTimeout
	}
	return StatusError
}

// DefaultTimeout bounds one sample.
const DefaultTimeout = 2 * time.Second

// DefaultSamples is how many samples a path's RTT is taken from; MaxSamples bounds
// the tools' --rtt-samples.
const (
	DefaultSamples = 3
	MaxSamples     = 100
)

// timeoutFactor and timeoutFloor bound a sample's wait by the resolve time just
// measured on the same port (~1 RTT): a reply later than 4 RTT is not coming, and
// resolvers rarely answer the UDP probe at all (the study got no reply from any), so a
// fixed multi-second wait would dominate a round's duration.
const (
	timeoutFactor = 4
	timeoutFloor  = 250 * time.Millisecond
)

// TimeoutAfter is the wait of one sample of a port whose query just took resolve:
// timeoutFactor times that, at least timeoutFloor, at most limit.
func TimeoutAfter(resolve, limit time.Duration) time.Duration {
	return min(max(timeoutFactor*resolve, timeoutFloor), limit)
}

// MedianNS is the path RTT from the answered samples' RTTs (ns): their median, the
// upper middle one of an even count; 0 for none.
func MedianNS(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// PathRTT is MedianNS of the answered samples.
func PathRTT(samples []Sample) time.Duration {
	var ns []int64
	for _, s := range samples {
		if s.Answered() {
			ns = append(ns, s.RTT.Nanoseconds())
		}
	}
	return time.Duration(MedianNS(ns))
}

// udpProbeLen is the random payload size of a UDP probe (small: not a DNS message).
const udpProbeLen = 16

// Sample is one RTT probe.
type Sample struct {
	Seq    int
	SentAt time.Time
	RTT    time.Duration // valid when Status is ok or conn-refused
	Status Status
	Detail string
}

// Answered reports whether the sample measured an RTT.
func (s Sample) Answered() bool {
	return s.Status == StatusOK || s.Status == StatusConnRefused
}

// Prober takes RTT samples. One Prober serves many concurrent probes (its TCP raw
// sockets, one per address family, are shared).
type Prober struct {
	mu         sync.Mutex
	tcp4, tcp6 *tcpProber
}

// New returns a Prober. TCP probes need a raw socket (root or CAP_NET_RAW); without one
// they fail with a classified error and the other transports still work.
func New() *Prober { return &Prober{} }

// Close releases the raw sockets.
func (p *Prober) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, t := range []*tcpProber{p.tcp4, p.tcp6} {
		if t != nil {
			errs = append(errs, t.close())
		}
	}
	return errors.Join(errs...)
}

// Probe takes n samples one after another (each its own socket and source port).
func (p *Prober) Probe(ctx context.Context, t Transport, addr netip.AddrPort, n int, timeout time.Duration) []Sample {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	out := make([]Sample, 0, n)
	for i := 0; i < n; i++ {
		var s Sample
		switch t {
		case UDP:
			s = probeDatagram(ctx, addr, timeout, randomPayload(udpProbeLen), nil)
		case QUIC:
			pkt, check := vnProbe()
			s = probeDatagram(ctx, addr, timeout, pkt, check)
		case TCP:
			s = p.probeTCP(ctx, addr, timeout)
		default:
			s = Sample{Status: StatusError, Detail: fmt.Sprintf("unknown transport %q", t)}
		}
		s.Seq = i
		out = append(out, s)
		if ctx.Err() != nil {
			break
		}
	}
	return out
}

func randomPayload(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// probeDatagram sends payload from a fresh random source port and waits for a reply
// that check accepts (nil: any datagram), or an ICMP error.
func probeDatagram(ctx context.Context, addr netip.AddrPort, timeout time.Duration, payload []byte, check func([]byte) error) Sample {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "udp", addr.String())
	if err != nil {
		return Sample{SentAt: time.Now(), Status: StatusError, Detail: err.Error()}
	}
	defer raw.Close()
	conn, err := kstamp.NewPacketConn(raw.(*net.UDPConn))
	if err != nil {
		return Sample{SentAt: time.Now(), Status: StatusError, Detail: err.Error()}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 1500)
	sent := time.Now()
	if _, err := conn.Write(payload); err != nil {
		return Sample{SentAt: sent, Status: StatusError, Detail: err.Error()}
	}
	for {
		// The reply's arrival is the kernel's receive timestamp: a busy prober (many
		// probes and measurements in flight) must not add its own wake-up delay.
		n, at, err := conn.ReadStamped(buf)
		got := time.Now()
		if !at.IsZero() && !at.Before(sent) && !at.After(got) {
			got = at
		}
		switch st := Classify(err); {
		case st == StatusConnRefused:
			return Sample{SentAt: sent, RTT: got.Sub(sent), Status: st, Detail: "port unreachable"}
		case err != nil && ctx.Err() != nil:
			return Sample{SentAt: sent, Status: StatusTimeout}
		case err != nil:
			return Sample{SentAt: sent, Status: st, Detail: err.Error()}
		}
		if check == nil {
			return Sample{SentAt: sent, RTT: got.Sub(sent), Status: StatusOK}
		}
		if cerr := check(buf[:n]); cerr == nil {
			return Sample{SentAt: sent, RTT: got.Sub(sent), Status: StatusOK}
		}
		// Not the reply to this probe: keep waiting.
	}
}
