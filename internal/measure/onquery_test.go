package measure_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// collector gathers the outcomes handed to Request.OnQuery and checks that none comes
// after Measure returned.
type collector struct {
	mu       sync.Mutex
	qs       []measure.Query
	returned bool
	late     int
}

func (c *collector) add(q measure.Query) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.returned {
		c.late++
	}
	c.qs = append(c.qs, q)
}

// measure runs req with c as its OnQuery and returns the result and the outcomes by seq.
func (c *collector) measure(m measure.Measurer, req *measure.Request) (*measure.Result, []measure.Query) {
	req.OnQuery = c.add
	res := m.Measure(context.Background(), req)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.returned = true
	qs := slices.Clone(c.qs)
	slices.SortFunc(qs, func(a, b measure.Query) int { return a.Seq - b.Seq })
	return res, qs
}

// With OnQuery every protocol hands each query's outcome to it, once, before Measure
// returns, and keeps none in Result.Queries; with one stream and with several.
func TestOnQueryDeliversEveryOutcome(t *testing.T) {
	const total = 9
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.5"})
	for _, p := range measure.Protocols {
		for _, streams := range []int{1, 3} {
			t.Run(string(p)+"/"+string(rune('0'+streams)), func(t *testing.T) {
				m, _ := measure.For(p)
				req := target(s, p)
				req.Mode, req.Streams, req.Variant = measure.ModePersistent, streams, measure.VariantPOST
				req.Timeout = 10 * time.Second
				req.Next = func(_ context.Context, seq int) (string, uint16, bool) {
					return "a.example", 1, seq < total
				}
				var c collector
				res, qs := c.measure(m, req)
				if res.Status != measure.StatusOK || len(res.Queries) != 0 || len(qs) != total || c.late != 0 {
					t.Fatalf("status %s (%v), %d kept, %d delivered (%d late)", res.Status, res.Err, len(res.Queries), len(qs), c.late)
				}
				for i, q := range qs {
					if q.Seq != i || q.Status != measure.StatusOK || q.Resolve <= 0 {
						t.Errorf("query %d: %+v", i, q)
					}
				}
			})
		}
	}
}

// Delivered failures still set the exchange's status: the lowest-seq failure, as when
// the outcomes are kept (DoUDP: an answer for another question after an answer; with
// several streams a third query, cut at the pipeline's buffer, fails too).
func TestOnQueryStatusIsFirstFailure(t *testing.T) {
	srv := measuretest.UDPAnswerer(t)
	m, _ := measure.For(measure.DoUDP)
	names := []string{"ok.example", "wrong.example", "big.example"}
	for _, streams := range []int{1, 3} {
		req := &measure.Request{Addr: srv.LocalAddr().(*net.UDPAddr).AddrPort(), Timeout: 10 * time.Second,
			QueryTimeout: 300 * time.Millisecond, Mode: measure.ModePersistent, Streams: streams, RcodeOnly: true}
		if streams == 1 {
			req.Timeout = 300 * time.Millisecond // a query on its own is bounded by the exchange
		}
		req.Next = func(_ context.Context, seq int) (string, uint16, bool) {
			if seq >= len(names) {
				return "", 0, false
			}
			return names[seq], dns.TypeA, true
		}
		var c collector
		res, qs := c.measure(m, req)
		want := []measure.Status{measure.StatusOK, measure.StatusBadResponse, measure.StatusBadResponse}
		if streams == 1 {
			want = want[:2] // the first failure ends a one-stream session
		}
		if len(qs) != len(want) || len(res.Queries) != 0 {
			t.Fatalf("streams %d: %d delivered, %d kept (%s %v)", streams, len(qs), len(res.Queries), res.Status, res.Err)
		}
		for i, q := range qs {
			if q.Seq != i || q.Status != want[i] {
				t.Errorf("streams %d, %s: seq %d %s %v; want %s", streams, names[i], q.Seq, q.Status, q.Err, want[i])
			}
		}
		if res.Status != measure.StatusBadResponse || !errors.Is(res.Err, qs[1].Err) {
			t.Errorf("streams %d: exchange %s %v; want query 1's %v", streams, res.Status, res.Err, qs[1].Err)
		}
	}
}
