// Package e2e takes the RTT probes that need root: TCP SYN probes send from a raw socket.
// Over IPv4 and IPv6 loopback only. Skips, saying so, when not root.
package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/measure/rtt"
)

// TestTCPProbes: a SYN to a listening port is answered (SYN-ACK), one to a closed port
// is refused (RST), with one Prober for both families.
func TestTCPProbes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: TCP SYN probes need a raw socket (root)")
	}
	p := rtt.New()
	defer p.Close()
	for _, host := range []string{"127.0.0.6", "::1"} {
		t.Run(host, func(t *testing.T) {
			s := measuretest.Start(t, measuretest.Config{Host: host})
			ctx := context.Background()
			check := func(name string, got []rtt.Sample, want rtt.Status, n int) {
				t.Helper()
				if len(got) != n {
					t.Fatalf("%s: %d samples, want %d", name, len(got), n)
				}
				for _, g := range got {
					if g.Status != want || (g.Answered() && g.RTT <= 0) {
						t.Errorf("%s: sample %+v, want %s", name, g, want)
					}
				}
			}
			check("tcp-open", p.Probe(ctx, rtt.TCP, s.TCP, 3, time.Second), rtt.StatusOK, 3)
			check("tcp-closed", p.Probe(ctx, rtt.TCP, measuretest.UnusedPort(t, "tcp", host), 2, time.Second), rtt.StatusConnRefused, 2)
		})
	}
}
