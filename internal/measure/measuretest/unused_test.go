package measuretest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestEphemeralLow(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int
		ok      bool
	}{
		{"32768\t60999\n", 32768, true},
		{"1024 65535", 1024, true},
		{"", 0, false},
		{"32768\n", 0, false},
		{"x 60999", 0, false},
		{"0 60999", 0, false},
		{"70000 80000", 0, false},
	} {
		f := filepath.Join(dir, "range")
		if err := os.WriteFile(f, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ephemeralLow(f)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: %d, %v; want %d (ok %v)", tc.content, got, err, tc.want, tc.ok)
		}
	}
	if _, err := ephemeralLow(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file gave no error")
	}
}

// The port is below the ephemeral range, and a datagram to it is refused (ICMP port
// unreachable, seen on the connected socket's next read) and a TCP connect reset.
func TestUnusedPort(t *testing.T) {
	lo, err := ephemeralLow(portRangeFile)
	if err != nil {
		t.Skipf("no ephemeral port range to compare with: %v", err)
	}
	for _, network := range []string{"udp", "tcp"} {
		ap := UnusedPort(t, network, "127.0.0.5")
		if ap.Addr().String() != "127.0.0.5" || int(ap.Port()) >= lo || ap.Port() < 16384 {
			t.Errorf("%s: %v, want 127.0.0.5 with a port in [16384, %d)", network, ap, lo)
		}
		c, err := net.DialTimeout(network, ap.String(), 5*time.Second)
		if network == "tcp" {
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("tcp connect to %v: %v, want connection refused", ap, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("udp to %v: %v, want connection refused", ap, err)
		}
		c.Close()
	}
}
