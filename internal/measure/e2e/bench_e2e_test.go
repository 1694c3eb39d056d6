package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/benchpool"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// benchMaxRTT: the benchmarks use paths up to 80 ms (5, 20, 80 ms): the timing error
// is what the client, the line and the servers add, not a share of the RTT, and short
// paths keep the benchmarks short.
const benchMaxRTT = 80 * time.Millisecond

// fullConcurrency is cmd/measure's default --concurrency.
const fullConcurrency = 64

// benchEndpoints: the endpoints of proto at every address of the well-behaved,
// project-served records on lossless, jitter-free paths up to benchMaxRTT (the bulk classes give
// hundreds of resolvers of one behaviour).
func benchEndpoints(pop *population.Population, proto measure.Protocol) []endpoint {
	var out []endpoint
	for i := range pop.Records {
		r := &pop.Records[i]
		path := pop.PathOf(r.Prefix.Addr())
		if r.Hostile != "" || r.Peer != "" || path.Loss > 0 || path.Jitter > 0 || path.RTT > benchMaxRTT {
			continue
		}
		for a := r.Prefix.Addr(); r.Prefix.Contains(a); a = a.Next() {
			for _, ep := range recordEndpoints(pop, r, a, true) {
				if ep.proto == proto {
					out = append(out, ep)
				}
			}
		}
	}
	return out
}

func pct(v []time.Duration, p float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}

// BenchmarkTestbedTimingError prints the timing error against the emulated path (measured
// minus the population's prediction: HandshakeTime for the handshake, one RTT for the
// resolve) at concurrency 1 and at full concurrency, per protocol. Each exchange is a
// fresh session (a warm-up: DoQ without a token, X25519). The error includes the delay
// line's own forwarding cost (docs/testbed.md: +0.16..0.42 ms idle) and the simulated
// servers' processing; a packet capture on the vantage's link splits it (wire_test.go):
// *-client-µs is measured minus wire (the measuring side's own error), *-server-µs wire
// minus emulated (the servers and the line).
//
//	go test -run XXX -bench TestbedTimingError -benchtime 200x ./internal/measure/e2e/
func BenchmarkTestbedTimingError(b *testing.B) {
	v, pop := testbed.RequirePopulation(b)
	for _, p := range []measure.Protocol{measure.DoUDP, measure.DoTCP, measure.DoT, measure.DoH, measure.DoQ} {
		eps := benchEndpoints(pop, p)
		if len(eps) == 0 {
			b.Fatalf("no %s endpoints", p)
		}
		for _, conc := range []int{1, fullConcurrency} {
			b.Run(fmt.Sprintf("%s/conc=%d", p, conc), func(b *testing.B) {
				timingError(b, v, pop, p, eps, conc)
			})
		}
	}
}

// timingError measures b.N fresh exchanges (at least conc) of protocol p over eps, conc
// at a time, with wire captures, and reports the error against the population's
// prediction (res-/hs-p50/p95-err-µs) and its split (reportWire).
func timingError(b *testing.B, v *testbed.Vantage, pop *population.Population, p measure.Protocol, eps []endpoint, conc int) {
	m, _ := measure.For(p)
	var mu sync.Mutex
	var hsErr, resErr []time.Duration
	failed := 0
	wire := &wireSpans{}
	stopWire := startWire(b, v)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	n := max(b.N, conc)
	b.ResetTimer()
	for i := 0; i < n; i++ {
		ep := eps[i%len(eps)]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			req := measure.Request{Addr: netip.AddrPortFrom(ep.addr, ep.port), ServerName: ep.sni,
				KeyShare: measure.KeyShareX25519, Peer: measure.NewPeer(), Timeout: 5 * time.Second}
			if ep.alpn != "" {
				req.ALPN = []string{ep.alpn}
			}
			res := m.Measure(context.Background(), &req)
			path := pop.PathOf(ep.addr)
			wantHS, _ := pop.HandshakeTime(ep.addr, ep.port, string(p), population.PhaseWarmup, population.ClientX25519)
			wire.add(req.Addr, res, wantHS, population.ResolveRTTs*path.RTT)
			mu.Lock()
			defer mu.Unlock()
			if res.Status != measure.StatusOK {
				failed++
				return
			}
			resErr = append(resErr, res.First().Resolve-population.ResolveRTTs*path.RTT)
			if p != measure.DoUDP {
				hsErr = append(hsErr, res.Handshake-wantHS)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	reportWire(b, wire.figures(stopWire()), false)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(pct(resErr, 0.5)), "res-p50-err-µs")
	b.ReportMetric(us(pct(resErr, 0.95)), "res-p95-err-µs")
	if len(hsErr) > 0 {
		b.ReportMetric(us(pct(hsErr, 0.5)), "hs-p50-err-µs")
		b.ReportMetric(us(pct(hsErr, 0.95)), "hs-p95-err-µs")
	}
	b.ReportMetric(float64(failed), "failed")
}

// BenchmarkTestbedRoundThroughput runs full campaign rounds (DoUDP, DoTCP, DoT, DoH GET
// and POST, DoQ on every verified port: warm-up + measured, RTT samples, qlog analyses,
// rows written to PostgreSQL) over b.N of the population's DoQ-verified, lossless,
// project-served resolvers on the testbed (more than the testbed holds: several rounds
// with distinct labels at the same time, sharing the concurrency), and prints:
//
//   - resolvers/h: resolvers covered per hour of wall time at that concurrency.
//
//   - cpu-ms/resolver and cpu-bound-resolvers/h: this process's CPU per resolver and the
//     resolvers two cores could cover per hour at that cost (the servers and the delay
//     line run in other processes and are not counted: the bound is the measuring side's).
//
//   - the handshake and resolve timing error of the stored rows against the population's
//     prediction (p50, p95): the accuracy at that throughput.
//
//     go test -run XXX -bench TestbedRoundThroughput -benchtime 400x ./internal/measure/e2e/
func BenchmarkTestbedRoundThroughput(b *testing.B) {
	v, pop := testbed.RequirePopulation(b)
	// Targets: every address of the DoQ endpoints, with their SNI and DoQ ports; the
	// other protocols on their default ports (measured optimistically, as cmd/measure does).
	all := targetsOf(benchEndpoints(pop, measure.DoQ), measure.DoUDP, measure.DoTCP, measure.DoT, measure.DoH)
	s := storetest.OpenVantage(b, "bench")
	ctx := context.Background()
	hour := time.Now().UTC().Truncate(time.Hour)
	// As fast as possible at two concurrencies (the CPU-bound rate, bursts of
	// handshakes), then paced: resolver starts spread evenly at the goal rate
	// (campaign.Config.Spread, as cmd/measure --every spreads a round over the hour),
	// which is how a campaign runs; the accuracy at that rate is the figure that counts.
	pacedRate := envInt("DOQSCAN_BENCH_RESOLVERS_PER_HOUR", 50000)
	type mode struct {
		name string
		conc int
		rate int // resolvers/h; 0: as fast as possible
	}
	for _, md := range []mode{{"conc=16", 16, 0}, {fmt.Sprintf("conc=%d", fullConcurrency), fullConcurrency, 0},
		{fmt.Sprintf("conc=%d/paced=%d-per-h", fullConcurrency, pacedRate), fullConcurrency, pacedRate}} {
		conc := md.conc
		b.Run(md.name, func(b *testing.B) {
			rounds := (b.N + len(all) - 1) / len(all)
			per := max(1, conc/rounds)
			targets := all[:min(b.N, len(all))]
			covered := rounds * len(targets)
			var spread time.Duration
			if md.rate > 0 {
				// Each concurrent round spreads its targets so that all rounds together
				// start md.rate resolvers per hour.
				spread = time.Duration(float64(covered) / float64(md.rate) * float64(time.Hour))
			}
			ids := make([]int64, rounds)
			errs := make([]error, rounds)
			var wg sync.WaitGroup
			wire := &wireSpans{}
			onResult := func(t campaign.Target, ep campaign.Endpoint, phase string, res *measure.Result) {
				if phase != campaign.PhaseWarmup {
					return
				}
				want, ok := pop.HandshakeTime(t.Addr, ep.Port, string(ep.Protocol), population.PhaseWarmup, population.ClientX25519)
				if !ok {
					return
				}
				wire.add(netip.AddrPortFrom(t.Addr, ep.Port), res, want, population.ResolveRTTs*pop.PathOf(t.Addr).RTT)
			}
			stopWire := startWire(b, v)
			b.ResetTimer()
			cpu0, start := benchpool.CPUTime(), time.Now()
			for r := 0; r < rounds; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cfg := campaign.Config{VantageID: "bench", Label: fmt.Sprintf("bench-%d-%d-%d-%d", conc, b.N, r, start.UnixNano()),
						Hour: hour, Concurrency: per, Timeout: 5 * time.Second, RTTSamples: 3, Spread: spread, OnResult: onResult,
						Protocols: []measure.Protocol{measure.DoUDP, measure.DoTCP, measure.DoT, measure.DoH, measure.DoQ}}
					sum, err := campaign.Run(ctx, s, cfg, targets, nil)
					errs[r] = err
					if sum != nil {
						ids[r] = sum.CampaignID
					}
				}()
			}
			wg.Wait()
			el, cpu := time.Since(start), benchpool.CPUTime()-cpu0
			b.StopTimer()
			reportWire(b, wire.figures(stopWire()), true)
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			var hsErr, resErr []time.Duration
			byProto := map[string]*[2][]time.Duration{} // protocol -> handshake, resolve errors
			notOK := 0
			rows, err := s.Pool.Query(ctx, `SELECT address, protocol, port, handshake_ns, resolve_ns, status
				FROM measurements WHERE campaign_id = ANY($1) AND phase = 'warmup'`, ids)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				var (
					addr       netip.Addr
					proto, st  string
					port       int32
					hs, resolv *int64
				)
				if err := rows.Scan(&addr, &proto, &port, &hs, &resolv, &st); err != nil {
					b.Fatal(err)
				}
				wantHS, ok := pop.HandshakeTime(addr, uint16(port), proto, population.PhaseWarmup, population.ClientX25519)
				if !ok {
					continue // e.g. DoT on a host without DoT: measured, refused, not timed
				}
				if st != "ok" {
					notOK++
					continue
				}
				pe := byProto[proto]
				if pe == nil {
					pe = &[2][]time.Duration{}
					byProto[proto] = pe
				}
				if resolv != nil {
					resErr = append(resErr, time.Duration(*resolv)-pop.PathOf(addr).RTT)
					pe[1] = append(pe[1], time.Duration(*resolv)-pop.PathOf(addr).RTT)
				}
				if hs != nil && proto != population.ProtoDoUDP {
					hsErr = append(hsErr, time.Duration(*hs)-wantHS)
					pe[0] = append(pe[0], time.Duration(*hs)-wantHS)
				}
			}
			rows.Close()
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			b.ReportMetric(float64(covered)/el.Hours(), "resolvers/h")
			b.ReportMetric(float64(cpu.Milliseconds())/float64(covered), "cpu-ms/resolver")
			b.ReportMetric(2*float64(time.Hour)/(float64(cpu)/float64(covered)), "cpu-bound-resolvers/h")
			b.ReportMetric(us(pct(hsErr, 0.5)), "hs-p50-err-µs")
			b.ReportMetric(us(pct(hsErr, 0.95)), "hs-p95-err-µs")
			b.ReportMetric(us(pct(resErr, 0.5)), "res-p50-err-µs")
			b.ReportMetric(us(pct(resErr, 0.95)), "res-p95-err-µs")
			b.ReportMetric(float64(notOK), "not-ok")
			if spread > 0 {
				// Paced: starts follow the schedule; what the wall clock adds beyond the
				// spread is the last resolvers' own duration (an hour-long round pays it once).
				b.ReportMetric(float64(covered)/spread.Hours(), "started-resolvers/h")
				b.ReportMetric((el - spread).Seconds(), "tail-s")
			}
			// Per protocol (p95 in µs), to see which exchanges carry the error.
			for proto, pe := range byProto {
				if len(pe[0]) > 0 {
					b.ReportMetric(us(pct(pe[0], 0.95)), proto+"-hs-p95-µs")
				}
				if len(pe[1]) > 0 {
					b.ReportMetric(us(pct(pe[1], 0.95)), proto+"-res-p95-µs")
				}
			}
		})
	}
}

// envInt reads a positive integer from the environment, or def.
func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}
