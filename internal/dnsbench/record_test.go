package dnsbench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// A persistent session records each query's outcome as it ends, not when the session
// ends: with one worker and one session for the whole run, at most 2 x Streams queries
// are issued and not yet recorded when an outcome is recorded (Streams outstanding, and
// up to Streams more ended whose outcomes the session is still handing over).
func TestPersistentSessionRecordsAsItGoes(t *testing.T) {
	const count = 40
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3"})
	for _, tg := range []Target{{Protocol: measure.DoUDP, Addr: s.UDP}, {Protocol: measure.DoT, Addr: s.DoT},
		{Protocol: measure.DoQ, Addr: s.DoQ}} {
		for _, streams := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/streams=%d", tg, streams), func(t *testing.T) {
				c := Config{Targets: []Target{tg}, Policy: measure.ModePersistent, Streams: streams, Workers: 1,
					Count: count, SessionQueries: 1000, Timeout: 5 * time.Second}
				if err := c.Validate(); err != nil {
					t.Fatal(err)
				}
				b := newBench(c, tg)
				var mu sync.Mutex
				n := 0
				b.onRecord = func(_, _ time.Time, q measure.Query) {
					mu.Lock()
					defer mu.Unlock()
					n++
					// Outcomes recorded so far (this one included) against queries issued.
					if issued := b.issued.Load(); issued > int64(n+2*streams) {
						t.Errorf("outcome %d (seq %d) recorded with %d queries issued", n, q.Seq, issued)
					}
				}
				r := b.run(context.Background(), nil)
				if n != count || r.Answered != count {
					t.Fatalf("%d outcomes, answered %d: %v %v", n, r.Answered, r.Statuses, r.ErrorSamples)
				}
			})
		}
	}
}
