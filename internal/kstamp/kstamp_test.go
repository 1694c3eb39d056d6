package kstamp

import (
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/testsupport"
)

// TestPacketConnStamps: a datagram over loopback gets a kernel time between its send and
// the read's return, and Arrival finds it.
func TestPacketConnStamps(t *testing.T) {
	srv, c := loopbackPair(t)
	c.Log.Arm()
	before := time.Now()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	sent, ok := c.Log.Sent()
	if !ok || sent.Before(before) {
		t.Fatalf("Sent = %v, %v; want a time after %v", sent, ok, before)
	}
	buf := make([]byte, 64)
	n, from, err := srv.ReadFromUDP(buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.WriteToUDP(buf[:n], from); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, at, err := c.ReadStamped(buf)
	done := time.Now()
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("ReadStamped = %q, %v", buf[:n], err)
	}
	if at.IsZero() || at.Before(before) || at.After(done) {
		t.Fatalf("kernel time %v not within [%v, %v]", at, before, done)
	}
	// ReadStamped hands the time to its caller and leaves the log alone; Read logs it.
	if got, ok := c.Log.Arrival(before, done); ok {
		t.Fatalf("Arrival after ReadStamped = %v, want nothing logged", got)
	}
	if _, err := srv.WriteToUDP([]byte("pong"), from); err != nil {
		t.Fatal(err)
	}
	if n, err = c.Read(buf); err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	done = time.Now()
	got, ok := c.Log.Arrival(before, done)
	if !ok || got.Before(at) || got.After(done) {
		t.Fatalf("Arrival = %v, %v; want a time within [%v, %v]", got, ok, at, done)
	}
	if _, ok := c.Log.Arrival(done.Add(time.Second), done); ok {
		t.Fatal("Arrival accepted a stamp before its since")
	}
	// A deadline still ends a read with a timeout error.
	_ = c.SetReadDeadline(time.Now())
	if _, _, err := c.ReadStamped(buf); err == nil {
		t.Fatal("read past the deadline succeeded")
	} else if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("deadline error %v is not a timeout", err)
	}
}

// TestConnStampsAndHandshakeRTT: TCP reads are stamped, EOF is io.EOF, and the kernel's
// handshake RTT of a loopback connect is positive and below the wall-clock connect time.
func TestConnStampsAndHandshakeRTT(t *testing.T) {
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 4)
		n, _ := s.Read(buf)
		_, _ = s.Write(buf[:n])
		s.Close()
	}()
	t0 := time.Now()
	raw, err := net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	wall := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if rtt, ok := HandshakeRTT(raw); !ok || rtt <= 0 || rtt > wall+time.Millisecond {
		t.Fatalf("HandshakeRTT = %v, %v (wall %v)", rtt, ok, wall)
	}
	c, err := NewConn(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := time.Now()
	if _, err := c.Write([]byte("abcd")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	at, ok := c.Log.Arrival(before, time.Now())
	if !ok || at.Before(before) {
		t.Fatalf("Arrival = %v, %v", at, ok)
	}
	if n, err := c.Read(buf); n != 0 || err == nil || err.Error() != "EOF" {
		t.Fatalf("read after close = %d, %v; want EOF", n, err)
	}
}

// FuzzParse: arbitrary control data never panics, and a well-formed SCM_TIMESTAMPNS
// message round-trips.
func FuzzParse(f *testing.F) {
	good := unix.UnixRights(3)[:0]
	f.Add(good)
	f.Add([]byte{1, 2, 3})
	ts := unix.NsecToTimespec(time.Date(2026, 11, 22, 8, 0, 0, 123456789, time.UTC).UnixNano())
	b := make([]byte, unix.CmsgSpace(int(sizeofTimespec)))
	h := (*unix.Cmsghdr)(unsafePtr(&b[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS
	h.SetLen(unix.CmsgLen(int(sizeofTimespec)))
	*(*unix.Timespec)(unsafePtr(&b[unix.CmsgLen(0)])) = ts
	if got := Parse(b); got.UnixNano() != ts.Nano() {
		f.Fatalf("Parse = %v, want %v", got, time.Unix(0, ts.Nano()))
	}
	f.Add(b)
	f.Add(append(append([]byte{}, good...), b...))
	f.Fuzz(func(t *testing.T, oob []byte) {
		if got, want := Parse(oob), parseAll(oob); !got.Equal(want) {
			t.Fatalf("Parse = %v, parsing every message = %v", got, want)
		}
	})
}

// parseAll is Parse through unix.ParseSocketControlMessage (which allocates).
func parseAll(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS {
			return timespec(m.Data)
		}
	}
	return time.Time{}
}

// TestParseAllocs: parsing a receive's control data allocates nothing.
func TestParseAllocs(t *testing.T) {
	b := make([]byte, unix.CmsgSpace(int(sizeofTimespec)))
	h := (*unix.Cmsghdr)(unsafePtr(&b[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS
	h.SetLen(unix.CmsgLen(int(sizeofTimespec)))
	*(*unix.Timespec)(unsafePtr(&b[unix.CmsgLen(0)])) = unix.NsecToTimespec(time.Now().UnixNano())
	if n := testing.AllocsPerRun(100, func() { _ = Parse(b) }); n != 0 {
		t.Fatalf("%v allocations per Parse", n)
	}
}

// TestReadFromAddress: ReadFrom gives the sender's address and port, IPv4 and IPv6.
func TestReadFromAddress(t *testing.T) {
	for _, c := range []struct{ net, ip string }{{"udp4", "127.0.0.1"}, {"udp6", "::1"}} {
		t.Run(c.net, func(t *testing.T) {
			rx, err := net.ListenUDP(c.net, &net.UDPAddr{IP: net.ParseIP(c.ip)})
			if err != nil {
				t.Skipf("SKIP: no %s loopback: %v", c.net, err)
			}
			pc, err := NewPacketConn(rx)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			tx, err := net.ListenUDP(c.net, &net.UDPAddr{IP: net.ParseIP(c.ip)})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Close()
			if _, err := tx.WriteTo([]byte("hi"), pc.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 16)
			n, from, err := pc.ReadFrom(buf)
			if err != nil || string(buf[:n]) != "hi" {
				t.Fatalf("ReadFrom = %q, %v", buf[:n], err)
			}
			want := tx.LocalAddr().(*net.UDPAddr).AddrPort()
			if got := from.(*net.UDPAddr).AddrPort(); got != want {
				t.Fatalf("from %v, want %v", got, want)
			}
		})
	}
}

// loopbackPair returns a UDP server socket on 127.0.0.1 and a stamped PacketConn
// connected to it, both closed when the test ends.
func loopbackPair(t *testing.T) (*net.UDPConn, *PacketConn) {
	t.Helper()
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	raw, err := net.DialUDP("udp4", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewPacketConn(raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}

// TestExchange: Exchange sends and reads the answer with its kernel time; a datagram
// that was waiting before the call is returned first and the call still returns (the
// answer's arrival wakes it); a refused, an oversized and a late exchange each give
// their error, sent telling whether the query left.
func TestExchange(t *testing.T) {
	srv, c := loopbackPair(t)
	testsupport.Echo(srv)
	buf := make([]byte, 64)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	before := time.Now()
	sent, n, at, err := c.Exchange([]byte("one"), buf)
	done := time.Now()
	if err != nil || string(buf[:n]) != "one" {
		t.Fatalf("Exchange = %q, %v", buf[:n], err)
	}
	if sent.Before(before) || at.Before(sent) || at.After(done) {
		t.Fatalf("sent %v, kernel time %v: want %v <= sent <= kernel time <= %v", sent, at, before, done)
	}

	// A stale datagram, in the socket's queue before Exchange starts (poll(2) says so).
	if _, err := srv.WriteToUDP([]byte("stale"), c.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	rc, _ := c.SyscallConn()
	var perr error
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		_, perr = unix.Poll(fds, 5000)
		if perr == nil && fds[0].Revents&unix.POLLIN == 0 {
			perr = errors.New("no datagram within 5 s")
		}
	})
	if perr != nil {
		t.Fatal(perr)
	}
	if _, n, _, err := c.Exchange([]byte("two"), buf); err != nil || string(buf[:n]) != "stale" {
		t.Fatalf("Exchange with a stale datagram queued = %q, %v; want stale", buf[:n], err)
	}
	if n, _, err := c.ReadStamped(buf); err != nil || string(buf[:n]) != "two" {
		t.Fatalf("then ReadStamped = %q, %v; want two", buf[:n], err)
	}

	// Oversized: the send fails, nothing left.
	if sent, _, _, err := c.Exchange(make([]byte, 70000), buf); !sent.IsZero() || !errors.Is(err, unix.EMSGSIZE) {
		t.Fatalf("oversized Exchange: sent %v, %v; want zero, EMSGSIZE", sent, err)
	} else if oe := (*net.OpError)(nil); !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("oversized Exchange: %v is not a write error", err)
	}

	// Past the deadline: a timeout, nothing sent.
	_ = c.SetReadDeadline(time.Now())
	if sent, _, _, err := c.Exchange([]byte("late"), buf); !sent.IsZero() {
		t.Fatalf("Exchange past the deadline sent at %v", sent)
	} else if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Exchange past the deadline: %v is not a timeout", err)
	}

	// Refused: the port is closed, the query left and ICMP port unreachable came back.
	srv.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if sent, _, _, err := c.Exchange([]byte("three"), buf); sent.IsZero() || !errors.Is(err, unix.ECONNREFUSED) {
		t.Fatalf("Exchange to a closed port: sent %v, %v; want a send time, ECONNREFUSED", sent, err)
	}
}
