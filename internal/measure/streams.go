package measure

import (
	"context"
	"slices"
	"sync"
)

// streams is how many of the session's queries may be outstanding at once.
func (r *Request) streams() int {
	if r.Mode == ModePersistent && r.Streams > 1 {
		return r.Streams
	}
	return 1
}

// exchangeFunc runs one query of a session: seq, its name and type, bounded by ctx.
// shared: other queries are outstanding on the session at the same time, so the
// session's write log (kstamp.Log.Arm/SentAt) cannot tell which write was this query's.
type exchangeFunc func(ctx context.Context, seq int, name string, qtype uint16, shared bool) Query

// runQueries runs req's queries on one session through ex and appends their outcomes
// to res in seq order (with req.OnQuery: hands each to it as it ends). With Streams <= 1 they run one after another and the first
// failure ends the session. With Streams = N > 1 up to N are outstanding at once, each
// bounded by QueryTimeout (0: the exchange's Timeout); after a failure no new query is
// asked for, and runQueries returns once every query it started has its outcome.
func runQueries(ctx context.Context, req *Request, res *Result, ex exchangeFunc) {
	n := req.streams()
	if n == 1 {
		for i := 0; ; i++ {
			name, qtype, ok := req.NextQuery(ctx, i)
			if !ok {
				return
			}
			q := ex(ctx, i, name, qtype, false)
			if req.OnQuery != nil {
				res.noteDelivered(&q)
				req.OnQuery(q)
			} else {
				res.Queries = append(res.Queries, q)
			}
			if q.Status != StatusOK {
				return
			}
		}
	}
	qt := req.QueryTimeout
	if qt <= 0 {
		qt = req.timeout()
	}
	var (
		mu     sync.Mutex
		failed bool
		out    []Query
		wg     sync.WaitGroup
	)
	slots := make(chan struct{}, n)
	for i := 0; ; i++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		mu.Lock()
		stop := failed
		mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
		name, qtype, ok := req.NextQuery(ctx, i)
		if !ok {
			break
		}
		// A query asked for is always run (on a failed session it fails at once): its
		// caller counted it as issued.
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, qt)
			q := ex(qctx, i, name, qtype, true)
			cancel()
			mu.Lock()
			if req.OnQuery != nil {
				res.noteDelivered(&q)
			} else {
				out = append(out, q)
			}
			failed = failed || q.Status != StatusOK
			mu.Unlock()
			if req.OnQuery != nil {
				req.OnQuery(q)
			}
			<-slots
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b Query) int { return a.Seq - b.Seq })
	res.Queries = append(res.Queries, out...)
}
