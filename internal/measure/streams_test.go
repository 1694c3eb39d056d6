package measure_test

import (
	"context"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// sessionProtocols are the protocols whose sessions keep several queries outstanding
// (Streams). DoUDP has no session: its queries go one after another (a load generator
// pipelines them over a transport of its own, internal/dnsbench/drive).
var sessionProtocols = []measure.Protocol{measure.DoTCP, measure.DoT, measure.DoH, measure.DoQ, measure.DoH3}

// With Streams = N a persistent session keeps N queries outstanding: the servers hold
// every answer until N queries wait, so each protocol completes only if its N queries
// really are in flight together. Outcomes come back in seq order.
func TestStreamsOutstandingAtOnce(t *testing.T) {
	const n, total = 3, 9
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.5", Hold: n})
	for _, p := range sessionProtocols {
		t.Run(string(p), func(t *testing.T) {
			m, _ := measure.For(p)
			req := s.Request(p)
			req.Mode, req.Streams, req.Variant = measure.ModePersistent, n, measure.VariantPOST
			req.Timeout = 10 * time.Second
			var seqs []int
			req.Next = func(_ context.Context, seq int) (string, uint16, bool) {
				seqs = append(seqs, seq) // one goroutine calls Next
				return "a.example", 1, seq < total
			}
			res := m.Measure(context.Background(), req)
			if res.Status != measure.StatusOK || len(res.Queries) != total {
				t.Fatalf("status %s (%v), %d queries", res.Status, res.Err, len(res.Queries))
			}
			for i, q := range res.Queries {
				if q.Seq != i || q.Status != measure.StatusOK || q.Resolve <= 0 || len(q.Answers) != 1 {
					t.Errorf("query %d: %+v", i, q)
				}
			}
			for i, sq := range seqs {
				if sq != i {
					t.Fatalf("Next called with %v", seqs)
				}
			}
		})
	}
}

// A stalling server: each outstanding query runs out on its own QueryTimeout, and after
// the first failure no further query is asked for.
func TestStreamsQueryTimeout(t *testing.T) {
	const n = 3
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.5", Behavior: hostile.Stall})
	for _, p := range sessionProtocols {
		t.Run(string(p), func(t *testing.T) {
			m, _ := measure.For(p)
			req := s.Request(p)
			req.Mode, req.Streams, req.Variant = measure.ModePersistent, n, measure.VariantPOST
			req.Timeout, req.QueryTimeout = time.Minute, 200*time.Millisecond
			asked := 0
			req.Next = func(context.Context, int) (string, uint16, bool) { asked++; return "a.example", 1, true }
			res := m.Measure(context.Background(), req)
			if asked != n || len(res.Queries) != n {
				t.Fatalf("asked %d, %d outcomes (%s %v)", asked, len(res.Queries), res.Status, res.Err)
			}
			for _, q := range res.Queries {
				if q.Status != measure.StatusTimeout {
					t.Errorf("query %d: %s %v", q.Seq, q.Status, q.Err)
				}
			}
		})
	}
}

// DoUDP runs a persistent session's queries one after another whatever Streams says:
// against a server that never answers, the first query times out alone and ends the
// session before a second is asked for.
func TestDoUDPQueriesOneAfterAnother(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.5", Behavior: hostile.Stall})
	m, _ := measure.For(measure.DoUDP)
	req := s.Request(measure.DoUDP)
	req.Mode, req.Streams, req.Timeout = measure.ModePersistent, 3, 300*time.Millisecond
	asked := 0
	req.Next = func(context.Context, int) (string, uint16, bool) { asked++; return "a.example", 1, true }
	res := m.Measure(context.Background(), req)
	if asked != 1 || len(res.Queries) != 1 || res.Queries[0].Status != measure.StatusTimeout {
		t.Fatalf("asked %d, outcomes %+v (%s %v)", asked, res.Queries, res.Status, res.Err)
	}
}
