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
	"github.com/doqscan/doqscan/internal/measure/rtt/rtttest"
)

// TestTCPProbes: a SYN to a listening port is answered (SYN-ACK), one to a closed port
// is refused (RST), with one Prober for both families.
func TestTCPProbes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: TCP SYN probes need a raw socket (root)")
	}
	rtttest.EachLoopback(t, func(t *testing.T, p *rtt.Prober, s *measuretest.Servers, host string) {
		ctx := context.Background()
		rtttest.Check(t, "tcp-open", p.Probe(ctx, rtt.TCP, s.TCP, 3, time.Second), rtt.StatusOK, 3)
		rtttest.Check(t, "tcp-closed", p.Probe(ctx, rtt.TCP, measuretest.UnusedPort(t, "tcp", host), 2, time.Second), rtt.StatusConnRefused, 2)
	})
}
