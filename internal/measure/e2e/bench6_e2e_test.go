package e2e_test

import (
	"fmt"
	"testing"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testbed"
)

// BenchmarkTestbedTimingErrorByFamily is BenchmarkTestbedTimingError (concurrency 1) on
// the population's dual-stack twins, the IPv4 and the IPv6 address of the same servers
// on the same paths, one after the other in the same run: the measuring side's error
// (*-p95-client-µs, measured minus the wire at the vantage's link) and the total error
// (*-p95-err-µs) per family, so an IPv6-specific cost in the client (sockets, packet
// info, the delay line's IPv6 parsing) shows as a difference between the two rows.
//
//	go test -run XXX -bench TestbedTimingErrorByFamily -benchtime 100x ./internal/measure/e2e/
func BenchmarkTestbedTimingErrorByFamily(b *testing.B) {
	v, pop := testbed.RequirePopulation(b)
	pop6 := pop.IPv6()
	for _, p := range []measure.Protocol{measure.DoUDP, measure.DoTCP, measure.DoT, measure.DoH, measure.DoQ} {
		var eps4, eps6 []endpoint
		for _, ep := range benchEndpoints(pop6, p) {
			if !ep.rec.Twin.IsValid() {
				continue
			}
			for _, e4 := range recordEndpoints(pop, pop.Lookup(ep.rec.Twin), ep.rec.Twin, true) {
				if e4.proto == p && e4.port == ep.port {
					eps4, eps6 = append(eps4, e4), append(eps6, ep)
					break
				}
			}
		}
		if len(eps6) == 0 {
			b.Fatalf("no dual-stack %s endpoint on a lossless path", p)
		}
		b.Run(fmt.Sprintf("%s/ipv4", p), func(b *testing.B) { timingError(b, v, pop, p, eps4, 1) })
		b.Run(fmt.Sprintf("%s/ipv6", p), func(b *testing.B) { timingError(b, v, pop6, p, eps6, 1) })
	}
}
