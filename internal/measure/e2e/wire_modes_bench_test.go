package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testbed"
)

// modesOf lists the modes a campaign measures protocol p in (campaign's units: no
// session to resume without TLS, no session at all over DoUDP).
func modesOf(p measure.Protocol) []measure.Mode {
	switch p {
	case measure.DoUDP:
		return []measure.Mode{measure.ModeFresh}
	case measure.DoTCP:
		return []measure.Mode{measure.ModeFresh, measure.ModePersistent}
	}
	return measure.Modes
}

// persistentQueries is the session length of the persistent cells.
const persistentQueries = 3

// BenchmarkWireErrorByMode measures every protocol in every mode a campaign has
// (fresh, resumed, 0rtt, persistent; a resumed or 0-RTT exchange after a warm-up that
// got the ticket, as the campaign does) against the population's well-behaved servers
// under packet captures on both router links, one exchange at a time, and prints per
// cell the measuring side's error (measured − wire) of every handshake and every query:
// p50, p95, min and max in µs. The QUIC handshake's wire end is told from the packet
// types on the wire (the server's last Handshake datagram before its 1-RTT data), not
// from the client's stamp. It runs twice: on a quiet machine, then with a parallel
// `go build -a std` loop loading both cores.
//
//	go test -run '^$' -bench WireErrorByMode -benchtime 40x ./internal/measure/e2e/
//
// -benchtime Nx sets the measured exchanges per cell.
func BenchmarkWireErrorByMode(b *testing.B) {
	v, pop := testbed.RequirePopulation(b)
	for _, load := range []string{"quiet", "loaded"} {
		b.Run(load, func(b *testing.B) {
			if load == "loaded" {
				defer startBuildLoad(b)()
			}
			for _, p := range measure.Protocols {
				eps := benchEndpoints(pop, p)
				if len(eps) == 0 {
					b.Fatalf("no %s endpoints", p)
				}
				for _, mode := range modesOf(p) {
					b.Run(fmt.Sprintf("%s/%s", p, mode), func(b *testing.B) {
						modeCell(b, v, p, mode, eps)
					})
				}
			}
		})
	}
}

// modeCell measures b.N exchanges of p in mode over eps and reports their wire error.
func modeCell(b *testing.B, v *testbed.Vantage, p measure.Protocol, mode measure.Mode, eps []endpoint) {
	m, _ := measure.For(p)
	wire := &wireSpans{}
	stop := startWire(b, v)
	failed := 0
	b.ResetTimer()
	for i := range b.N {
		ep := eps[i%len(eps)]
		peer := measure.NewPeer()
		req := func(mode measure.Mode) *measure.Request {
			r := &measure.Request{Addr: netip.AddrPortFrom(ep.addr, ep.port), ServerName: ep.sni, Mode: mode,
				KeyShare: measure.KeyShareX25519, Peer: peer, Timeout: 5 * time.Second, Variant: measure.VariantGET}
			if ep.alpn != "" {
				r.ALPN = []string{ep.alpn}
			}
			if mode == measure.ModePersistent {
				r.Queries = persistentQueries
			}
			return r
		}
		if mode == measure.ModeResumed || mode == measure.Mode0RTT {
			if res := m.Measure(context.Background(), req(measure.ModeResumed)); res.Status != measure.StatusOK {
				failed++
				continue
			}
		}
		r := req(mode)
		res := m.Measure(context.Background(), r)
		if res.Status != measure.StatusOK {
			failed++
			continue
		}
		wire.add(r.Addr, res, 0, 0)
	}
	b.StopTimer()
	f := wire.figures(stop())
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	for _, d := range []struct {
		what string
		errs []time.Duration
	}{{"hs", f.hsClient}, {"res", f.resClient}} {
		if len(d.errs) == 0 {
			continue
		}
		lo, hi := d.errs[0], d.errs[0]
		for _, e := range d.errs {
			lo, hi = min(lo, e), max(hi, e)
		}
		b.Logf("%-5s %-10s %-3s client error (measured - wire), %3d durations: p50 %6.1f µs  p95 %6.1f µs  min %6.1f µs  max %7.1f µs",
			p, mode, d.what, len(d.errs), us(pct(d.errs, 0.5)), us(pct(d.errs, 0.95)), us(lo), us(hi))
		b.ReportMetric(us(pct(d.errs, 0.5)), d.what+"-p50-client-µs")
		b.ReportMetric(us(pct(d.errs, 0.95)), d.what+"-p95-client-µs")
		b.ReportMetric(us(lo), d.what+"-min-client-µs")
	}
	b.ReportMetric(float64(f.unmatched), "unmatched")
	b.ReportMetric(float64(failed), "failed")
	if failed > 0 || f.unmatched > 0 {
		b.Errorf("%s %s: %d exchanges failed, %d durations not placed on the captures", p, mode, failed, f.unmatched)
	}
}

// startBuildLoad keeps both cores busy with a parallel `go build -a std` (into a
// throwaway cache, run again as soon as it ends) until the returned stop is called.
func startBuildLoad(b *testing.B) (stop func()) {
	b.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		b.Skipf("SKIP: no go on PATH for the load (%v)", err)
	}
	cache := b.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	builds := 0
	wg.Go(func() {
		for ctx.Err() == nil {
			cmd := exec.CommandContext(ctx, gobin, "build", "-a", "-p", "2", "-o", os.DevNull, "std")
			cmd.Env = append(os.Environ(), "GOCACHE="+cache, "GOFLAGS=")
			if out, err := cmd.CombinedOutput(); err != nil && ctx.Err() == nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					b.Errorf("load: %v", err)
					return
				}
				b.Logf("load: go build: %v: %s", err, out)
			}
			builds++
		}
	})
	return func() {
		cancel()
		wg.Wait()
		b.Logf("load: %d builds of std ran during the cell", builds)
	}
}
