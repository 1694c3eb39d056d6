package campaign_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// BenchmarkRoundThroughput runs a full round (all six protocols, DoH GET+POST, warm-up +
// measured, RTT samples, analyses, rows written) over b.N distinct resolver addresses
// served by one set of servers listening on 0.0.0.0 (every 127.0.0.0/8 address reaches
// them) with a known delay, and prints resolvers per hour and the resolve-time error
// against that delay.
func BenchmarkRoundThroughput(b *testing.B) {
	const delay = 10 * time.Millisecond
	s := storetest.OpenVantage(b, "bench")
	ctx := context.Background()
	srv := measuretest.Start(b, measuretest.Config{Host: "0.0.0.0", Delay: delay})
	qsrv := measuretest.Start(b, measuretest.Config{Host: "0.0.0.0", QUICDelay: delay})
	for _, conc := range []int{16, 64} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			var targets []campaign.Target
			for i := 0; i < b.N; i++ {
				addr := netip.AddrFrom4([4]byte{127, 2, byte(i >> 8), byte(i)})
				targets = append(targets, campaign.Target{Addr: addr, Endpoints: endpoints(srv, qsrv)})
			}
			cfg := campaign.Config{VantageID: "bench", Label: fmt.Sprintf("bench-%d-%d", conc, b.N), Hour: hour,
				Concurrency: conc, Timeout: 5 * time.Second, RTTSamples: 3, RTTTimeout: time.Second, BatchSize: 32}
			b.ResetTimer()
			start := time.Now()
			sum, err := campaign.Run(ctx, s, cfg, targets, logger())
			el := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			var p50, p95 float64
			err = s.Pool.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY resolve_ns - $2),
				percentile_cont(0.95) WITHIN GROUP (ORDER BY resolve_ns - $2)
				FROM measurements WHERE campaign_id = $1 AND phase = 'measured' AND status = 'ok' AND protocol <> 'doudp' OR
				(campaign_id = $1 AND phase = 'measured' AND protocol = 'doudp' AND status = 'ok')`, sum.CampaignID, delay.Nanoseconds()).Scan(&p50, &p95)
			if err != nil {
				b.Fatal(err)
			}
			notOK := 0
			for _, st := range sum.Status {
				for k, n := range st {
					if k != "ok" {
						notOK += n
					}
				}
			}
			b.ReportMetric(float64(b.N)/el.Hours(), "resolvers/h")
			b.ReportMetric(p50/1e3, "resolve-p50-err-µs")
			b.ReportMetric(p95/1e3, "resolve-p95-err-µs")
			b.ReportMetric(float64(notOK), "not-ok")
		})
	}
}
