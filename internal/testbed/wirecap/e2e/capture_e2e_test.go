package e2e

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/wirecap"
	"github.com/doqscan/doqscan/internal/testsupport"
)

func requireCapture(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: capturing needs root")
	}
	requireTcpdump(t)
}

func requireTcpdump(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Skip("SKIP: tcpdump not installed")
	}
}

// loopbackPair is a UDP server socket on 127.0.0.1 and a client connected to it, both
// closed when the test ends.
func loopbackPair(t *testing.T) (srv, cli *net.UDPConn) {
	t.Helper()
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err = net.DialUDP("udp4", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}

// TestCaptureLoopback captures a UDP echo exchange on lo (127.0.0.1 only) and stops
// right after the last reply: every packet must be in the capture (the end-of-capture
// marker flushes tcpdump's ring), between the client's own stamps.
func TestCaptureLoopback(t *testing.T) {
	requireCapture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, cli := loopbackPair(t)
	testsupport.Echo(srv)
	local := cli.LocalAddr().(*net.UDPAddr).AddrPort()
	remote := srv.LocalAddr().(*net.UDPAddr).AddrPort()

	for round := range 3 {
		c, err := wirecap.Start(ctx, "", "lo", "udp and port "+strconv.Itoa(int(remote.Port())))
		if err != nil {
			t.Fatal(err)
		}
		const n = 5
		var froms, tos []time.Time
		buf := make([]byte, 1500)
		for i := range n {
			froms = append(froms, time.Now())
			if _, err := cli.Write(make([]byte, 10+i)); err != nil {
				t.Fatal(err)
			}
			_ = cli.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := cli.Read(buf); err != nil {
				t.Fatal(err)
			}
			tos = append(tos, time.Now())
		}
		pkts, st, err := c.Stop()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d packets, stats %+v", round, len(pkts), st)
		if !st.Flushed || st.Dropped() != 0 {
			t.Fatalf("capture not flushed or lossy: %+v", st)
		}
		if len(pkts) != 2*n {
			t.Fatalf("captured %d packets, want %d: %+v", len(pkts), 2*n, pkts)
		}
		ix := wirecap.NewIndex(pkts)
		for i := range n {
			s, e, ok := ix.Exchange(local, remote, wirecap.ProtoUDP, froms[i], tos[i])
			if !ok || s.Before(froms[i]) || e.After(tos[i]) {
				t.Errorf("exchange %d: wire %v..%v ok=%v outside client %v..%v", i, s, e, ok, froms[i], tos[i])
			}
		}
		for i, p := range pkts {
			want := 10 + i/2
			if p.Payload != want {
				t.Errorf("packet %d: payload %d, want %d", i, p.Payload, want)
			}
		}
		// Stop is idempotent.
		again, st2, err := c.Stop()
		if err != nil || len(again) != len(pkts) || st2 != st {
			t.Fatalf("second Stop: %d, %+v, %v", len(again), st2, err)
		}
	}
}

// TestConcurrentCaptures: two captures on one interface; the first one's marker neither
// flushes nor appears in the second.
func TestConcurrentCaptures(t *testing.T) {
	requireCapture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, cli := loopbackPair(t)
	filter := "udp and port " + strconv.Itoa(srv.LocalAddr().(*net.UDPAddr).Port)
	send := func() {
		if _, err := cli.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := srv.ReadFromUDP(make([]byte, 16)); err != nil {
			t.Fatal(err)
		}
	}
	a, err := wirecap.Start(ctx, "", "lo", filter)
	if err != nil {
		t.Fatal(err)
	}
	b, err := wirecap.Start(ctx, "", "lo", filter)
	if err != nil {
		t.Fatal(err)
	}
	send()
	pa, sa, err := a.Stop()
	if err != nil {
		t.Fatal(err)
	}
	send()
	pb, sb, err := b.Stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a: %d packets %+v; b: %d packets %+v", len(pa), sa, len(pb), sb)
	if !sa.Flushed || !sb.Flushed || len(pa) != 1 || len(pb) != 2 {
		t.Fatalf("a: %d packets, flushed %v; b: %d packets, flushed %v; want 1 and 2, both flushed", len(pa), sa.Flushed, len(pb), sb.Flushed)
	}
	if sb.Captured < len(pb)+2 {
		t.Fatalf("b captured %d records: want its %d packets plus both markers", sb.Captured, len(pb))
	}
}

func TestStartErrors(t *testing.T) {
	requireCapture(t)
	ctx := context.Background()
	if _, err := wirecap.Start(ctx, "", "wirecap-nosuch0", ""); err == nil {
		t.Fatal("capture on a missing interface started")
	} else {
		t.Logf("missing interface: %v", err)
	}
	if _, err := wirecap.Start(ctx, "", "lo", "not a (valid filter"); err == nil {
		t.Fatal("capture with a bad filter started")
	} else {
		t.Logf("bad filter: %v", err)
	}
	if _, err := wirecap.ForVantage(ctx, "BAD NAME", 0); err == nil {
		t.Fatal("bad instance name accepted")
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := wirecap.Start(ctx, "", "lo", ""); !errors.Is(err, wirecap.ErrMissingTcpdump) {
		t.Fatalf("without tcpdump in PATH: %v", err)
	}
}

// TestStartContext: a capture whose context ends stops tcpdump; Stop still returns.
func TestStartContext(t *testing.T) {
	requireCapture(t)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := wirecap.Start(ctx, "", "lo", "udp and port 9")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-c.Done()
	pkts, st, err := c.Stop()
	t.Logf("after cancel: %d packets, %+v, %v", len(pkts), st, err)
	if st.Flushed {
		t.Fatal("flushed after the context ended")
	}
}
