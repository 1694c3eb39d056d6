package e2e_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/doqscan/doqscan/internal/measure/rtt"
	"github.com/doqscan/doqscan/internal/testbed"
)

// TestIPv6HandshakeToRTTRatio is TestHandshakeToRTTRatio on the population's IPv6 half:
// every well-behaved IPv6 endpoint (twins, IPv6-only hosts, the IPv6 peer), every
// protocol it serves, takes the round trips and time the population predicts on its
// IPv6 path, the qlog names the cause, and the RTT probe over IPv6 agrees with the path.
func TestIPv6HandshakeToRTTRatio(t *testing.T) {
	v, _ := testbed.RequirePopulation(t)
	v6 := *v
	v6.Population = v.Population.IPv6() // the IPv6 half answers every ground-truth question
	pop6 := v6.Population
	if len(pop6.Records) == 0 {
		t.Fatal("the population has no IPv6 half")
	}
	prober := rtt.New()
	defer prober.Close()
	ctx := context.Background()
	n := 0
	for _, ep := range endpoints(pop6, true) {
		path := pop6.PathOf(ep.addr)
		if path.Loss > 0 {
			continue // loss makes the round trips random
		}
		for _, ks := range keySharesFor(pop6, ep) {
			n++
			name := fmt.Sprintf("%s/%s/%s:%d/%s", ep.rec.Class, ep.proto, ep.addr, ep.port, ks)
			t.Run(name, func(t *testing.T) {
				checkEndpoint(t, ctx, &v6, prober, ep, ks)
			})
		}
	}
	if n == 0 {
		t.Fatal("no well-behaved IPv6 endpoint")
	}
}
