package e2e_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/probe"

	"github.com/doqscan/doqscan/internal/testbed"
)

// BenchmarkSendByFamily prints the built-in sender's probes/s (`zprobe send`'s probe.Send, the
// QUIC probe on 784/853/8853 and the DNS probe on 53, unpaced) over an IPv4 hitlist and
// over an IPv6 one of b.N silent testbed addresses each, in the same run, and their
// ratio (ipv6/ipv4). Silent addresses: the sender's cost, not the servers' replies.
//
//	go test -run XXX -bench SendByFamily -benchtime 4000x ./internal/probe/
func BenchmarkSendByFamily(b *testing.B) {
	v := testbed.Require(b)
	if v.Population == nil {
		b.Skip("SKIP: the testbed runs without a population file")
	}
	families := []struct {
		name    string
		testbed netip.Prefix
		first   netip.Addr
	}{
		{"ipv4", testbedPrefix, netip.MustParseAddr("198.19.200.0")},
		{"ipv6", testbedPrefix6, netip.MustParseAddr("2001:2:0:8003::1")},
	}
	rates := map[string]float64{}
	for _, f := range families {
		b.Run(f.name, func(b *testing.B) {
			var hl []netip.Addr
			for a := f.first; len(hl) < b.N; a = a.Next() {
				if !f.testbed.Contains(a) {
					b.Fatalf("ran out of %s addresses", f.testbed)
				}
				if v.Population.Lookup(a) == nil {
					hl = append(hl, a)
				}
			}
			tb := f.testbed
			safety, err := probe.BuildSafety(nil, &tb, false, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			sum, err := probe.Send(context.Background(), probe.SendConfig{Hitlist: hl, Safety: safety, Rate: 1e9,
				Cooldown: 100 * time.Millisecond, QUICPorts: probe.DefaultQUICPorts, DNSPorts: probe.DefaultDNSPorts})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			rates[f.name] = sum.RatePPS
			b.ReportMetric(sum.RatePPS, "probes/s")
			b.ReportMetric(float64(sum.ProbesSent), "probes")
		})
	}
	if rates["ipv4"] > 0 && rates["ipv6"] > 0 {
		b.Logf("zprobe send: IPv4 %.0f probes/s, IPv6 %.0f probes/s, ratio ipv6/ipv4 %.2f",
			rates["ipv4"], rates["ipv6"], rates["ipv6"]/rates["ipv4"])
	}
}
