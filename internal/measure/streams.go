package measure

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
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
// to res in seq order. With Streams <= 1 they run one after another and the first
// failure ends the session. With Streams = N > 1 up to N are outstanding at once, each
// bounded by QueryTimeout (0: the exchange's Timeout); after a failure no new query is
// asked for, and runQueries returns once every query it started has its outcome.
func runQueries(ctx context.Context, req *Request, res *Result, ex exchangeFunc) {
	n := req.streams()
	if n == 1 {
		for i := 0; ; i++ {
			name, qtype, ok := req.next(ctx, i)
			if !ok {
				return
			}
			q := ex(ctx, i, name, qtype, false)
			res.Queries = append(res.Queries, q)
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
		name, qtype, ok := req.next(ctx, i)
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
			out = append(out, q)
			failed = failed || q.Status != StatusOK
			mu.Unlock()
			<-slots
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b Query) int { return a.Seq - b.Seq })
	res.Queries = append(res.Queries, out...)
}

// idReply is one message read from a session whose answers are matched by DNS ID, with
// the time its last packet arrived.
type idReply struct {
	raw  []byte
	done time.Time
}

// idMux matches the answers of a session with several queries outstanding to their
// queries by DNS message ID: pipelined DoTCP/DoT (RFC 7766 §6.2.1.1, answers may come
// out of order) and several DoUDP queries on one socket. One goroutine reads; writes
// are serialised.
type idMux struct {
	write func([]byte) error // one whole query message (framed by the caller)
	wmu   sync.Mutex

	mu      sync.Mutex
	waiting map[uint16]chan idReply
	readErr error
	closed  chan struct{} // the reader stopped (readErr set)
}

// newIDMux starts the reader: read returns the next message and its arrival time, or an
// error that ends the session's reads.
func newIDMux(read func() ([]byte, time.Time, error), write func([]byte) error) *idMux {
	m := &idMux{write: write, waiting: map[uint16]chan idReply{}, closed: make(chan struct{})}
	go func() {
		for {
			raw, done, err := read()
			if err != nil {
				m.mu.Lock()
				m.readErr = err
				m.mu.Unlock()
				close(m.closed)
				return
			}
			if len(raw) < 2 {
				continue
			}
			id := binary.BigEndian.Uint16(raw)
			m.mu.Lock()
			ch := m.waiting[id]
			delete(m.waiting, id)
			m.mu.Unlock()
			if ch != nil { // else not an answer to an outstanding query: dropped
				ch <- idReply{raw: raw, done: done}
			}
		}
	}()
	return m
}

// register picks an ID no outstanding query uses and waits for its answer.
func (m *idMux) register() (uint16, chan idReply) {
	ch := make(chan idReply, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	id := newID()
	for m.waiting[id] != nil {
		id = newID()
	}
	m.waiting[id] = ch
	return id, ch
}

func (m *idMux) rewait(id uint16, ch chan idReply) {
	m.mu.Lock()
	m.waiting[id] = ch
	m.mu.Unlock()
}

func (m *idMux) forget(id uint16) {
	m.mu.Lock()
	delete(m.waiting, id)
	m.mu.Unlock()
}

// exchange sends q (framed by frame) and waits for the answer with its ID until ctx
// ends. A message with the ID that is not a valid answer (RFC 5452 §9.1: possibly
// injected) is skipped while the query waits; if only such arrived, the query is a bad
// response.
func (m *idMux) exchange(ctx context.Context, q dnsmsg.Query, seq int, frame func([]byte) []byte) Query {
	out := Query{Seq: seq, KeepaliveTimeout: -1}
	id, ch := m.register()
	defer m.forget(id)
	q.ID = id
	msg, err := dnsmsg.Build(q)
	if err != nil {
		out.Status, out.Err = StatusError, err
		return out
	}
	m.wmu.Lock()
	out.StartedAt = time.Now()
	err = m.write(frame(msg))
	m.wmu.Unlock()
	if err != nil {
		out.Status, out.Err = Classify(err), fmt.Errorf("write query: %w", err)
		return out
	}
	var lastBad error
	// got judges a message with the query's ID: the outcome, or false to keep waiting.
	got := func(r idReply) (Query, bool) {
		done := r.done
		if done.Before(out.StartedAt) {
			done = out.StartedAt
		}
		res := finishQuery(out, q, r.raw, done)
		if res.Status == StatusOK || !errors.Is(res.Err, dnsmsg.ErrBadResponse) {
			return res, true
		}
		lastBad = res.Err
		m.rewait(id, ch)
		return Query{}, false
	}
	for {
		select {
		case r := <-ch:
			if res, ok := got(r); ok {
				return res
			}
		case <-m.closed:
			select {
			case r := <-ch: // the answer came before the reads ended
				if res, ok := got(r); ok {
					return res
				}
			default:
			}
			if lastBad != nil {
				out.Status, out.Err = StatusBadResponse, lastBad
				return out
			}
			out.Status, out.Err = Classify(m.readErr), m.readErr
			return out
		case <-ctx.Done():
			if lastBad != nil {
				out.Status, out.Err = StatusBadResponse, lastBad
				return out
			}
			err := fmt.Errorf("%w: no answer", context.DeadlineExceeded)
			out.Status, out.Err = Classify(err), err
			return out
		}
	}
}
