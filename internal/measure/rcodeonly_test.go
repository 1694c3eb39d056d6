package measure_test

import (
	"context"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// TestRcodeOnly: with RcodeOnly every protocol (one query, and three outstanding on a
// persistent session) reports the answer's status and rcode without unpacking it, and
// a server that answers garbage is still a bad response.
func TestRcodeOnly(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.2"})
	bad := measuretest.Start(t, measuretest.Config{Host: "127.0.0.2", Behavior: measuretest.Garbage})
	for _, p := range measure.Protocols {
		t.Run(string(p), func(t *testing.T) {
			m, err := measure.For(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, streams := range []int{1, 3} {
				req := target(s, p)
				req.RcodeOnly, req.NoQlog = true, true
				if streams > 1 {
					req.Mode, req.Streams = measure.ModePersistent, streams
					req.Next = func(_ context.Context, seq int) (string, uint16, bool) {
						return "test.com", 1, seq < 6
					}
				}
				res := m.Measure(context.Background(), req)
				if res.Status != measure.StatusOK || len(res.Queries) == 0 {
					t.Fatalf("streams %d: status %s (%v), %d queries", streams, res.Status, res.Err, len(res.Queries))
				}
				for _, q := range res.Queries {
					if q.Status != measure.StatusOK || q.Rcode != 0 || q.Resolve <= 0 || len(q.Answers) != 0 || q.KeepaliveTimeout != -1 {
						t.Fatalf("streams %d: query %+v", streams, q)
					}
				}
			}
			req := target(bad, p)
			req.RcodeOnly, req.NoQlog, req.Timeout = true, true, 500*time.Millisecond
			res := m.Measure(context.Background(), req)
			if q := res.First(); q.Status != measure.StatusBadResponse && res.Status != measure.StatusBadResponse {
				t.Fatalf("garbage: status %s / query %s (%v)", res.Status, q.Status, res.Err)
			}
		})
	}
}
