package simdns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// fastOpenQueue is the TCP_FASTOPEN queue length of a TFO listener (RFC 7413 §5.1's
	// "pending TFO requests" bound; the kernel's qlen).
	fastOpenQueue = 256
	// fastOpenSysctl enables TFO for servers in the current network namespace (bit 0x2 of
	// net.ipv4.tcp_fastopen; 0x1 is the client bit).
	fastOpenSysctl = "/proc/sys/net/ipv4/tcp_fastopen"
	// resetReadTimeout bounds how long ClassReset waits for the first bytes.
	resetReadTimeout = 5 * time.Second
)

// bindTCP binds p's wildcard listener and one TCP Fast Open listener per address the
// directory lists for p. Every socket gets SO_REUSEPORT (and SO_REUSEADDR) so specific
// binds, ours for TFO or a third-party peer's on its own address, can coexist with the
// wildcard one; the kernel delivers each connection or datagram to the most specific
// socket bound to its address.
func (s *Server) bindTCP(p Protocol, port int) error {
	tfo := s.cfg.Directory.FastOpen(p)
	lc := net.ListenConfig{Control: sockopts(false)}
	bound := map[bool]int{} // family (IPv6?) -> the port its wildcard listener bound
	for _, listen := range s.listens() {
		network := "tcp4"
		if listen.Is6() {
			network = "tcp6" // an IPv6 wildcard listener is IPv6-only (IPV6_V6ONLY)
		}
		ln, err := lc.Listen(s.ctx, network, netip.AddrPortFrom(listen, uint16(port)).String())
		if err != nil {
			return fmt.Errorf("simdns: listen %s tcp [%s]:%d: %w", p, listen, port, err)
		}
		s.listeners = append(s.listeners, ln)
		s.setAddr(p, ln.Addr())
		bound[listen.Is6()] = ln.Addr().(*net.TCPAddr).Port
		s.wg.Go(func() { s.acceptLoop(p, ln) })
	}
	for _, a := range tfo {
		a = s.cfg.LocalAddr(a)
		port, ok := bound[a.Is6()]
		if !ok {
			return fmt.Errorf("simdns: TCP Fast Open on %s: no listener of its address family", a)
		}
		lc := net.ListenConfig{Control: sockopts(true)}
		l, err := lc.Listen(s.ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err != nil {
			return fmt.Errorf("simdns: listen %s with TCP Fast Open on [%s]:%d: %w", p, a, port, err)
		}
		s.listeners = append(s.listeners, l)
		s.wg.Go(func() { s.acceptLoop(p, l) })
	}
	return nil
}

func sockopts(fastOpen bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
				return
			}
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
				return
			}
			if fastOpen {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_FASTOPEN, fastOpenQueue)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
}

// enableFastOpenSysctl sets the server bit of net.ipv4.tcp_fastopen, keeping the others.
func enableFastOpenSysctl() error {
	b, err := os.ReadFile(fastOpenSysctl)
	if err != nil {
		return fmt.Errorf("simdns: read %s: %w", fastOpenSysctl, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("simdns: parse %s: %w", fastOpenSysctl, err)
	}
	if v&0x2 != 0 {
		return nil
	}
	if err := os.WriteFile(fastOpenSysctl, []byte(strconv.Itoa(v|0x3)), 0o644); err != nil {
		return fmt.Errorf("simdns: enable TCP Fast Open (server) in %s: %w", fastOpenSysctl, err)
	}
	return nil
}

// FastOpenServerEnabled reports whether this network namespace lets TFO listeners accept
// data in SYNs.
func FastOpenServerEnabled() bool {
	b, err := os.ReadFile(fastOpenSysctl)
	if err != nil {
		return false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && v&0x2 != 0
}

func (s *Server) acceptLoop(p Protocol, ln net.Listener) {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return
			}
			// EMFILE and friends: back off instead of spinning, and keep serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("simdns: accept", "protocol", p, "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		select {
		case s.conns <- struct{}{}:
		default:
			s.nRejected.Add(1)
			reset(c)
			continue
		}
		s.nTCP.Add(1)
		s.wg.Go(func() {
			defer func() { <-s.conns }()
			stop := context.AfterFunc(s.ctx, func() { c.Close() })
			defer stop()
			s.guard(p.String(), func() { s.handleConn(p, c) })
		})
	}
}

// handleConn acts out the connection-level classes and hands the rest to the protocol.
func (s *Server) handleConn(p Protocol, c net.Conn) {
	local := s.cfg.MapAddr(addrOf(c.LocalAddr()))
	b, ok := s.cfg.Directory.Behaviour(local, p)
	if !ok {
		reset(c)
		return
	}
	switch {
	case b.Class == ClassReset:
		// Let the first bytes (query or ClientHello) arrive, then RST.
		c.SetReadDeadline(time.Now().Add(resetReadTimeout))
		var one [1]byte
		c.Read(one[:])
		reset(c)
		return
	case b.Class == ClassTLSStall || (b.Class == ClassStall && p == DoTCP):
		s.hold(c)
		return
	}
	switch p {
	case DoTCP:
		s.serveStream(c, b, DoTCP)
	case DoT:
		s.serveDoT(c, local, b)
	case DoH:
		s.serveDoH(c, local, b)
	default:
		c.Close()
	}
}

// reset closes c with an RST (SO_LINGER with a zero timeout) instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// hold reads and discards whatever the peer sends, answering nothing, until the peer
// closes or HoldTimeout passes; then closes.
func (s *Server) hold(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(s.cfg.Limits.HoldTimeout))
	io.Copy(io.Discard, c)
}

// trickle sends an endless stream: prefix, then one random byte every TrickleEvery, until
// the peer goes away or HoldTimeout passes.
func (s *Server) trickle(c net.Conn, prefix []byte) {
	defer c.Close()
	end := time.Now().Add(s.cfg.Limits.HoldTimeout)
	c.SetDeadline(end)
	if _, err := c.Write(prefix); err != nil {
		return
	}
	t := time.NewTicker(s.cfg.Limits.TrickleEvery)
	defer t.Stop()
	b := garbage()
	for i := 0; time.Now().Before(end); i++ {
		select {
		case <-t.C:
		case <-s.ctx.Done():
			return
		}
		if _, err := c.Write(b[i%len(b) : i%len(b)+1]); err != nil {
			return
		}
	}
}
