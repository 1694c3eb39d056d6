package dnsbench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// A query's outcome is timed by its own answer or deadline, never by when the client
// got round to it after closing the session or analysing its qlog (at high concurrency
// that work ran past the deadline and stretched the run's elapsed time): a stalled query
// counts exactly at issue + timeout, no failure after its deadline, and the report's
// elapsed time ends at the last outcome.
func TestOutcomesAreTimedByTheirDeadline(t *testing.T) {
	const timeout = 250 * time.Millisecond
	for _, beh := range []hostile.Behaviour{hostile.Stall, hostile.Reset, hostile.Flood} {
		s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", Behavior: beh})
		for _, tg := range []Target{{Protocol: measure.DoQ, Addr: s.DoQ}, {Protocol: measure.DoH3, Variant: measure.VariantPOST, Addr: s.DoH3},
			{Protocol: measure.DoT, Addr: s.DoT}, {Protocol: measure.DoUDP, Addr: s.UDP}} {
			for _, pc := range []struct {
				policy  measure.Mode
				streams int
			}{{measure.ModeFresh, 1}, {measure.ModePersistent, 1}, {measure.ModePersistent, 3}} {
				t.Run(fmt.Sprintf("%s/%s/%s/streams=%d", beh, tg, pc.policy, pc.streams), func(t *testing.T) {
					c := Config{Targets: []Target{tg}, Policy: pc.policy, Streams: pc.streams, Workers: 4, Count: 12, Timeout: timeout}
					if err := c.Validate(); err != nil {
						t.Fatal(err)
					}
					b := newBench(c, tg)
					var mu sync.Mutex
					var last time.Time
					n := 0
					b.onRecord = func(issued, done time.Time, q measure.Query) {
						mu.Lock()
						defer mu.Unlock()
						n++
						if done.After(last) {
							last = done
						}
						if q.Status == measure.StatusOK {
							t.Errorf("%s answered", tg)
							return
						}
						// The first query of a multi-stream session gets its own timeout
						// once the session is up: at most two in all.
						bound := issued.Add(timeout)
						if pc.streams > 1 {
							bound = bound.Add(timeout)
						}
						if done.After(bound) {
							t.Errorf("%s outcome at issue+%v, after its deadline (issue+%v)", q.Status, done.Sub(issued), bound.Sub(issued))
						}
						if q.Status == measure.StatusTimeout && pc.streams == 1 && !done.Equal(issued.Add(timeout)) {
							t.Errorf("timeout recorded at issue+%v, want issue+%v", done.Sub(issued), timeout)
						}
					}
					r := b.run(context.Background(), nil)
					if n != 12 || r.Sent != 12 || r.Answered != 0 {
						t.Fatalf("%d outcomes, sent %d answered %d: %v", n, r.Sent, r.Answered, r.Statuses)
					}
					if want := last.Sub(b.start).Seconds(); r.Elapsed != want {
						t.Errorf("elapsed %vs, the last outcome came at %vs", r.Elapsed, want)
					}
					if beh == hostile.Stall && r.Statuses[measure.StatusTimeout] != 12 {
						t.Errorf("stalled: %v %v", r.Statuses, r.ErrorSamples)
					}
				})
			}
		}
	}
}

// BenchmarkRunEndAgainstHostile prints how long after the last query's deadline (its
// issue + timeout) a 64-worker run against a flooding or stalling DoQ/DoH3 server
// returns: the clean-up (closing sessions, collecting and analysing qlogs) done after
// the deadline on a busy machine. Outcomes are timed by their deadline regardless
// (TestOutcomesAreTimedByTheirDeadline); this is what the caller waits on top.
func BenchmarkRunEndAgainstHostile(b *testing.B) {
	const timeout = time.Second
	for _, beh := range []hostile.Behaviour{hostile.Flood, hostile.Stall} {
		s := measuretest.Start(b, measuretest.Config{Host: "127.0.0.3", Behavior: beh})
		for _, tg := range []Target{{Protocol: measure.DoQ, Addr: s.DoQ}, {Protocol: measure.DoH3, Variant: measure.VariantPOST, Addr: s.DoH3}} {
			b.Run(string(beh)+"/"+string(tg.Protocol), func(b *testing.B) {
				var over, worst time.Duration
				for range b.N {
					c := Config{Targets: []Target{tg}, Workers: 64, Duration: time.Second, Timeout: timeout}
					if err := c.Validate(); err != nil {
						b.Fatal(err)
					}
					bn := newBench(c, tg)
					var mu sync.Mutex
					var last time.Time
					bn.onRecord = func(issued, _ time.Time, _ measure.Query) {
						mu.Lock()
						if d := issued.Add(timeout); d.After(last) {
							last = d
						}
						mu.Unlock()
					}
					bn.run(context.Background(), nil)
					o := max(time.Since(last), 0)
					over += o
					worst = max(worst, o)
				}
				b.ReportMetric(float64(over.Microseconds())/1000/float64(b.N), "ms_after_last_deadline")
				b.ReportMetric(float64(worst.Microseconds())/1000, "worst_ms")
			})
		}
	}
}
