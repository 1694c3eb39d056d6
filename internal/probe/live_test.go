package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	// Reserve a free port, then hand it to the server.
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
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Wait until the server answers (its start-up is the condition, polled by probing).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := exchange(t, addr, quicProbe(t, quicver.ProbeGrease), 200*time.Millisecond); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("gtlsserver never answered")
		}
	}
	checkStack(t, "ngtcp2", addr, []uint32{quicver.V1})
}
