package rtt_test

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/measure/rtt"
	"github.com/doqscan/doqscan/internal/measure/rtt/rtttest"
	"github.com/doqscan/doqscan/internal/outcome"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// TestProbes takes every kind of UDP and QUIC sample over IPv4 and IPv6 loopback, with
// one Prober for both families (as measure uses it). The TCP SYN probes need a raw socket
// (root): internal/measure/rtt/e2e takes those.
func TestProbes(t *testing.T) {
	rtttest.EachLoopback(t, testProbes)
}

func testProbes(t *testing.T, p *rtt.Prober, s *measuretest.Servers, host string) {
	ctx := context.Background()
	// QUIC: the DoQ server answers the reserved version with Version Negotiation.
	rtttest.Check(t, "quic", p.Probe(ctx, rtt.QUIC, s.DoQ, 3, time.Second), rtt.StatusOK, 3)
	// UDP to the DNS port: our random payload is not DNS; miekg/dns answers it with an
	// error or drops it, depending on the random header bits (the study saw no resolver
	// reply at all). Either is a classified sample.
	for _, g := range p.Probe(ctx, rtt.UDP, s.UDP, 2, 300*time.Millisecond) {
		if g.Status != rtt.StatusOK && g.Status != rtt.StatusTimeout {
			t.Errorf("udp-dns: %+v", g)
		}
	}
	// UDP to a closed port: ICMP port unreachable ends the probe.
	rtttest.Check(t, "udp-closed", p.Probe(ctx, rtt.UDP, measuretest.UnusedPort(t, "udp", host), 2, time.Second), rtt.StatusConnRefused, 2)
	// A UDP echo answers.
	echo, err := net.ListenPacket("udp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	testsupport.Echo(echo)
	rtttest.Check(t, "udp-echo", p.Probe(ctx, rtt.UDP, echo.LocalAddr().(*net.UDPAddr).AddrPort(), 2, time.Second), rtt.StatusOK, 2)
}

// TestClassify: every status has a meaning, and the errors a probe meets map as the
// probes record them (ICMP port unreachable and a TCP RST are both conn-refused).
func TestClassify(t *testing.T) {
	if err := rtt.Statuses.Check(); err != nil {
		t.Fatal(err)
	}
	refused := &net.OpError{Op: "read", Net: "udp", Err: os.NewSyscallError("recvmsg", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		err  error
		want rtt.Status
	}{
		{nil, rtt.StatusOK},
		{refused, rtt.StatusConnRefused},
		{&net.OpError{Op: "read", Net: "udp", Err: os.ErrDeadlineExceeded}, rtt.StatusTimeout},
		{context.DeadlineExceeded, rtt.StatusTimeout},
		{outcome.Errorf(rtt.StatusConnRefused, "RST from %s", "198.19.0.1"), rtt.StatusConnRefused},
		{&net.OpError{Op: "write", Net: "udp", Err: os.NewSyscallError("sendmsg", syscall.ENETUNREACH)}, rtt.StatusError},
		{errors.New("connection refused"), rtt.StatusError}, // text is not a class
	} {
		if got := rtt.Classify(c.err); got != c.want || !rtt.Statuses.Has(got) {
			t.Errorf("Classify(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestPathRTT: the path RTT is the median of the answered samples (a conn-refused one
// measured an RTT too; a timeout did not), the upper middle of an even count, 0 when
// none answered; a sample's wait is 4x the resolve time within 250 ms and the limit.
func TestPathRTT(t *testing.T) {
	ms := time.Millisecond
	ok := func(d time.Duration) rtt.Sample { return rtt.Sample{Status: rtt.StatusOK, RTT: d} }
	cases := []struct {
		samples []rtt.Sample
		want    time.Duration
	}{
		{nil, 0},
		{[]rtt.Sample{{Status: rtt.StatusTimeout}}, 0},
		{[]rtt.Sample{ok(30 * ms), ok(10 * ms), {Status: rtt.StatusTimeout, RTT: ms}}, 30 * ms},
		{[]rtt.Sample{ok(30 * ms), ok(10 * ms), {Status: rtt.StatusConnRefused, RTT: 20 * ms}}, 20 * ms},
	}
	for i, c := range cases {
		if got := rtt.PathRTT(c.samples); got != c.want {
			t.Errorf("case %d: %v, want %v", i, got, c.want)
		}
	}
	for _, c := range []struct{ resolve, limit, want time.Duration }{
		{0, 2 * time.Second, 250 * ms}, {100 * ms, 2 * time.Second, 400 * ms}, {time.Second, 2 * time.Second, 2 * time.Second},
	} {
		if got := rtt.TimeoutAfter(c.resolve, c.limit); got != c.want {
			t.Errorf("TimeoutAfter(%v, %v) = %v, want %v", c.resolve, c.limit, got, c.want)
		}
	}
}
