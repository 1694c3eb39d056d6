package udploop_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench/udploop"
	"github.com/doqscan/doqscan/internal/kstamp"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

func newPoller(t *testing.T) *udploop.Poller {
	t.Helper()
	p, err := udploop.NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func echo(t *testing.T, network, addr string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenPacket(network, addr)
	if err != nil {
		t.Skipf("SKIP: no %s loopback here: %v", network, err)
	}
	t.Cleanup(func() { c.Close() })
	testsupport.Echo(c)
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// A Poller's sockets, over IPv4 and IPv6 loopback: a Wait reports the socket that got
// a datagram, under its key; Recv returns the datagram with a kernel time between its
// send and the read, then ErrWouldBlock; the socket's source address is a loopback one of the server's family, with a port of
// its own.
func TestPollerSockets(t *testing.T) {
	p := newPoller(t)
	for i, srv := range []netip.AddrPort{echo(t, "udp4", "127.0.0.6:0"), echo(t, "udp6", "[::1]:0")} {
		key := uint64(10 + i)
		s, err := p.Dial(srv, key)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Local.Addr().IsLoopback() || s.Local.Addr().Is4() != srv.Addr().Is4() || s.Local.Port() == 0 || s.Local.Port() == srv.Port() {
			t.Errorf("%v: local address %v", srv, s.Local)
		}
		sent, err := s.Send([]byte("ping"))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := p.Wait(nil)
		if err != nil || !slices.Equal(keys, []uint64{key}) {
			t.Fatalf("%v: Wait %v %v, want [%d]", srv, keys, err, key)
		}
		buf := make([]byte, 64)
		n, at, err := s.Recv(buf)
		if err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("%v: Recv %q %v", srv, buf[:n], err)
		}
		if at.Before(sent) || at.After(time.Now()) {
			t.Errorf("%v: stamp %v, sent %v", srv, at, sent)
		}
		if _, _, err := s.Recv(buf); !errors.Is(err, kstamp.ErrWouldBlock) {
			t.Errorf("%v: second Recv %v, want ErrWouldBlock", srv, err)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}
}

// An IPv6 address's zone names the interface of a link-local destination: a zone that
// is an interface dials, one that is not fails.
func TestPollerZone(t *testing.T) {
	p := newPoller(t)
	srv := echo(t, "udp6", "[::1]:0")
	s, err := p.Dial(netip.AddrPortFrom(srv.Addr().WithZone("lo"), srv.Port()), 1)
	if err != nil {
		t.Fatalf("zone lo: %v", err)
	}
	s.Close()
	if _, err := p.Dial(netip.AddrPortFrom(srv.Addr().WithZone("no-such-interface"), srv.Port()), 2); err == nil {
		t.Error("a zone that is no interface dialled")
	}
}

// Wake ends a Wait with no keys; a closed port's ICMP error wakes the Wait and is
// Recv's ECONNREFUSED; a closed Poller dials nothing.
func TestPollerWakeRefusedClose(t *testing.T) {
	p := newPoller(t)
	if err := p.Wake(); err != nil {
		t.Fatal(err)
	}
	if keys, err := p.Wait(nil); err != nil || len(keys) != 0 {
		t.Fatalf("Wait after Wake: %v %v", keys, err)
	}

	s, err := p.Dial(measuretest.UnusedPort(t, "udp", "127.0.0.6"), 7)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Send([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if keys, err := p.Wait(nil); err != nil || !slices.Equal(keys, []uint64{7}) {
		t.Fatalf("Wait: %v %v", keys, err)
	}
	if _, _, err := s.Recv(make([]byte, 64)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Recv from a closed port: %v, want ECONNREFUSED", err)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Dial(netip.MustParseAddrPort("127.0.0.6:53"), 8); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Dial after Close: %v, want net.ErrClosed", err)
	}
	if err := p.Wake(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Wake after Close: %v", err)
	}
}

// WaitFor: with nothing to report it returns no key, at once for 0 and not before its
// bound for a bound; a datagram or a Wake ends a long bound early.
func TestPollerWaitFor(t *testing.T) {
	p := newPoller(t)
	if keys, err := p.WaitFor(nil, 0); err != nil || len(keys) != 0 {
		t.Fatalf("WaitFor(0) with nothing: %v %v", keys, err)
	}
	const bound = 3 * time.Millisecond
	start := time.Now()
	if keys, err := p.WaitFor(nil, bound); err != nil || len(keys) != 0 {
		t.Fatalf("WaitFor(%v) with nothing: %v %v", bound, keys, err)
	}
	if waited := time.Since(start); waited < bound {
		t.Errorf("WaitFor(%v) returned after %v", bound, waited)
	}

	s, err := p.Dial(echo(t, "udp4", "127.0.0.6:0"), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Send([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if keys, err := p.WaitFor(nil, time.Minute); err != nil || !slices.Equal(keys, []uint64{3}) {
		t.Fatalf("WaitFor with an answer coming: %v %v, want [3]", keys, err)
	}
	if _, _, err := s.Recv(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if err := p.Wake(); err != nil {
		t.Fatal(err)
	}
	if keys, err := p.WaitFor(nil, time.Minute); err != nil || len(keys) != 0 {
		t.Fatalf("WaitFor after Wake: %v %v", keys, err)
	}
}
