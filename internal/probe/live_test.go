package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/certs/certtest"
	"github.com/doqscan/doqscan/internal/quicver"
)

// Tests against real QUIC stacks on loopback: quic-go (in process) and ngtcp2's
// gtlsserver (Debian ngtcp2-server). Each sends the committed probes and classifies the
// real Version Negotiation packets the stacks answer with.

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	return certtest.TLS(certtest.SelfSignedLeaf(t, certtest.ECDSA, "localhost", "127.0.0.1"))
}

// exchange sends payload to addr and returns the first datagram back, or an error on
// timeout (a silent drop is the expected answer to some probes).
func exchange(t *testing.T, addr string, payload []byte, wait time.Duration) ([]byte, error) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func quicProbe(t *testing.T, v uint32) []byte {
	p := DefaultQUICProbe()
	p.Version = v
	b, err := p.Build()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func classifyVN(t *testing.T, payload []byte) Result {
	c, err := NewClassifier(DefaultQUICProbe(), DefaultDNSProbe(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Classify(Reply{Addr: netip.MustParseAddr("127.0.0.1"), Port: 784, Sport: 784, Payload: payload, ICMPType: -1})
}

// checkStack sends the three probe versions to addr and checks: reserved and all-ones
// versions get a valid VN listing want (a subset), version 0 gets nothing.
func checkStack(t *testing.T, stack, addr string, want []uint32) {
	for _, v := range []uint32{quicver.ProbeGrease, quicver.ProbeAllOnes} {
		got, err := exchange(t, addr, quicProbe(t, v), 3*time.Second)
		if err != nil {
			t.Fatalf("%s: no answer to probe version %#08x: %v", stack, v, err)
		}
		// The classifier uses the default probe (grease version); a VN for the all-ones
		// probe echoes the same CIDs and does not list either version.
		res := classifyVN(t, got)
		if res.Kind != KindQUICVN {
			t.Fatalf("%s: probe %#08x: kind %s (%s), packet %x", stack, v, res.Kind, res.Reason, got)
		}
		for _, w := range want {
			found := false
			for _, x := range res.Versions {
				found = found || x == w
			}
			if !found {
				t.Errorf("%s: VN %v does not list %s", stack, quicver.Names(res.Versions), quicver.Name(w))
			}
		}
		t.Logf("%s answers %#08x with VN: %v (grease %d)", stack, v, quicver.Names(res.Versions), res.Grease)
		if dir := os.Getenv("DOQSCAN_CAPTURE_VN"); dir != "" {
			os.WriteFile(filepath.Join(dir, stack+"-"+strconv.FormatUint(uint64(v), 16)+".bin"), got, 0o644)
		}
	}
	// Version 0 is the VN packet itself: stacks drop it (FIELD-NOTES). A quiet second
	// is the observable for "dropped".
	if got, err := exchange(t, addr, quicProbe(t, quicver.Negotiation), time.Second); err == nil {
		t.Logf("%s answered version 0 with %d bytes (kind %s)", stack, len(got), classifyVN(t, got).Kind)
	} else {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%s: version 0: %v", stack, err)
		}
		t.Logf("%s drops version 0 (no answer within 1 s)", stack)
	}
}

func TestLiveQUICGo(t *testing.T) {
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"doq"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if _, err := ln.Accept(ctx); err != nil {
				return
			}
		}
	}()
	checkStack(t, "quic-go", ln.Addr().String(), []uint32{quicver.V1, quicver.V2})
	// Smaller than 1200 bytes: quic-go ignores it (RFC 9000 §14.1).
	p := DefaultQUICProbe()
	b, _ := p.Build()
	if got, err := exchange(t, ln.Addr().String(), b[:1100], time.Second); err == nil {
		t.Errorf("quic-go answered a 1100-byte probe: %x", got)
	}
}

func TestLiveNgtcp2(t *testing.T) {
	// Debian installs it in /usr/sbin, which is not on an unprivileged user's PATH.
	bin, err := exec.LookPath("gtlsserver")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/gtlsserver"); err != nil {
			t.Skip("ngtcp2's gtlsserver not installed (apt-get install ngtcp2-server)")
		}
	}
	dir := t.TempDir()
	cert := selfSigned(t)
	kder, _ := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600)
	addr := startGtlsserver(t, bin, dir)
	checkStack(t, "ngtcp2", addr, []uint32{quicver.V1})
}

// startGtlsserver starts gtlsserver on a free loopback port and returns its address once
// it answers a probe from the socket it bound. The port is found free and handed over,
// so another process may take it in between: an answer counts only while gtlsserver
// holds the port (/proc), and a server that could not bind it (it exits) or whose port
// another process answers on is stopped and started on another port.
func startGtlsserver(t *testing.T, bin, dir string) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		pc.Close()
		cmd := exec.Command(bin, "--quiet", "127.0.0.1", strconv.Itoa(port), filepath.Join(dir, "key.pem"), filepath.Join(dir, "cert.pem"))
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		var werr error
		go func() { werr = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		why := waitGtlsserver(t, cmd.Process.Pid, port, addr, exited, &werr)
		if why == "" {
			return addr
		}
		_ = cmd.Process.Kill()
		if attempt == 5 {
			t.Fatalf("gtlsserver: %s (port %d, attempt %d)", why, port, attempt)
		}
		t.Logf("gtlsserver on port %d: %s; another port", port, why)
	}
}

// waitGtlsserver waits until gtlsserver (pid) holds port and answers a probe there
// (polled by probing); it returns why not: it exited, another process answers on the
// port, or no answer within 10 s.
func waitGtlsserver(t *testing.T, pid, port int, addr string, exited <-chan struct{}, werr *error) string {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Sprintf("exited before answering (%v)", *werr)
		default:
		}
		_, err := exchange(t, addr, quicProbe(t, quicver.ProbeGrease), 200*time.Millisecond)
		owns, oerr := ownsUDP(pid, port)
		if oerr != nil {
			t.Fatal(oerr)
		}
		switch {
		case err == nil && owns:
			return ""
		case err == nil:
			return "another process answered on its port"
		}
	}
	return "no answer within 10 s"
}

// ownsUDP reports whether process pid has a UDP socket bound to 127.0.0.1:port: one of
// its file descriptors is the socket inode /proc/net/udp lists for that address.
func ownsUDP(pid, port int) (bool, error) {
	table, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return false, err
	}
	local := fmt.Sprintf("0100007F:%04X", port) // 127.0.0.1 as the kernel prints it (little-endian)
	sockets := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 9 && f[1] == local {
			sockets["socket:["+f[9]+"]"] = true
		}
	}
	if len(sockets) == 0 {
		return false, nil
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, nil // the process is gone
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && sockets[l] {
			return true, nil
		}
	}
	return false, nil
}

// TestOwnsUDP: ownsUDP finds this process's own loopback UDP socket, and not for another
// process or a port nobody holds.
func TestOwnsUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	if owns, err := ownsUDP(os.Getpid(), port); err != nil || !owns {
		t.Errorf("own socket: %v %v", owns, err)
	}
	if owns, err := ownsUDP(1, port); err != nil || owns {
		t.Errorf("pid 1 owns our socket: %v %v", owns, err)
	}
	pc.Close()
	if owns, err := ownsUDP(os.Getpid(), port); err != nil || owns {
		t.Errorf("closed socket: %v %v", owns, err)
	}
}

// TestWaitGtlsserverOtherAnswer: an answer from a process other than the server started
// (here quic-go in this process, the "server" a sleep) does not count as the server's.
func TestWaitGtlsserverOtherAnswer(t *testing.T) {
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"doq"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var werr error
	go func() { werr = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	port := ln.Addr().(*net.UDPAddr).Port
	if why := waitGtlsserver(t, cmd.Process.Pid, port, ln.Addr().String(), exited, &werr); why != "another process answered on its port" {
		t.Errorf("waitGtlsserver: %q", why)
	}
}
