// Package udploop is dnsbench's DoUDP load on many sockets from one goroutine per loop
// (epoll, Poller). A query is built, timed and classified by measure's DoUDP
// rules (measure.CheckAnswer, measure.ReadFailure), so a session on the loop ends as
// measure.For(DoUDP) would have ended it; the hourly measurement never runs here.
package udploop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench/drive"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/kstamp"
	"github.com/doqscan/doqscan/internal/measure"
)

// Loop runs DoUDP sessions of one query at a time (Streams <= 1) on one goroutine of
// its own, for a load generator with many sockets and one query outstanding on each:
// one epoll wait (Poller) reports every socket with an answer, where a session
// on its caller's goroutine parks and is woken through Go's netpoller for each answer.
// A query is timed as measure's DoUDP client times it (from just before the send to the answer's
// kernel arrival stamp) and classified the same way.
//
// The loop gathers its sends: the next queries of the sessions answered go out together,
// once an eighth of its sessions (at least one) wait for theirs or the first of them has
// waited loopBatchWait, as a network card's interrupt moderation gathers packets. A
// server then takes a burst of queries per interrupt rather than one (on a veth pair,
// 0.66 to 0.74 interrupts per answer on the server's CPU instead of 0.84 to 0.89). A
// query's time starts at its send, so the wait is not in its latency.
//
// Measure runs a session there; its Plan's Next and Deliver are then called on the
// loop's goroutine, so Next must not block (an unpaced load) and Deliver must be quick:
// every session of the loop waits meanwhile.
type Loop struct {
	p    *Poller
	keys atomic.Uint64 // the last socket key handed out

	mu      sync.Mutex
	posted  []*loopSession // sessions to start, or whose context ended (the loop's inbox)
	closing bool
	err     error // the poller failed: the loop has ended
	done    chan struct{}

	// The loop goroutine's own.
	active    map[uint64]*loopSession
	buf       []byte // one read's datagram
	msg       []byte // one query's message
	ready     []uint64
	inbox     []*loopSession
	answered  []*loopSession // sessions whose next query is to be sent (sendDue)
	heldSince time.Time      // when the first of answered was answered
}

// loopBatchShare and loopBatchWait: the loop sends its answered sessions' next queries
// once 1/loopBatchShare of its sessions wait for them, or loopBatchWait after the first.
const (
	loopBatchShare = 8
	loopBatchWait  = 50 * time.Microsecond
)

// loopSession is one Measure call on the loop.
type loopSession struct {
	ctx  context.Context
	req  *measure.Request
	plan drive.Plan
	res  *measure.Result
	sock *kstamp.Socket
	key  uint64
	done chan struct{} // closed by the loop when the session is over
	err  error         // the loop failed before the session started

	// The loop goroutine's own.
	started, over bool
	outstanding   bool // a query is sent and its outcome not yet delivered
	seq           int
	q             dnsmsg.Query
	out           measure.Query // the query outstanding
	lastBad       error         // the last datagram that was not its answer
}

// New starts a loop; Close ends it.
func New() (*Loop, error) {
	p, err := NewPoller()
	if err != nil {
		return nil, fmt.Errorf("DoUDP loop: %w", err)
	}
	l := &Loop{p: p, done: make(chan struct{}), active: map[uint64]*loopSession{}, buf: make([]byte, measure.MaxUDPResponse)}
	go l.run()
	return l, nil
}

// Close waits for the sessions in progress to end, then stops the loop.
func (l *Loop) Close() error {
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	_ = l.p.Wake()
	<-l.done
	return l.p.Close()
}

// errLoopClosed is a session's start on a loop that is closing.
var errLoopClosed = errors.New("DoUDP loop: closed")

// post hands s to the loop: to start it (start), or to end its query outstanding (its
// context is done).
func (l *Loop) post(s *loopSession, start bool) error {
	l.mu.Lock()
	switch {
	case l.err != nil:
		l.mu.Unlock()
		return l.err
	case l.closing && start:
		l.mu.Unlock()
		return errLoopClosed
	}
	l.posted = append(l.posted, s)
	l.mu.Unlock()
	return l.p.Wake()
}

// Measure runs req, a DoUDP session of one query at a time (plan.Streams is not
// consulted), on the loop, bounded by req.Timeout (measure.DefaultTimeout when 0) as
// measure.For(DoUDP) bounds it: the session's queries are plan.Next's, handed to
// plan.Deliver, and the first failure ends it (Result.Status and Err).
func (l *Loop) Measure(ctx context.Context, req *measure.Request, plan drive.Plan) *measure.Result {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = measure.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := &measure.Result{Protocol: measure.DoUDP, StartedAt: time.Now(), Status: measure.StatusOK}
	key := l.keys.Add(1)
	sock, err := l.p.Dial(req.Addr, key)
	if err != nil {
		res.Status, res.Err = measure.Failure(ctx, measure.StepHandshake, err)
		return res
	}
	res.Local = sock.Local
	s := &loopSession{ctx: ctx, req: req, plan: plan, res: res, sock: sock, key: key, done: make(chan struct{})}
	if err := l.post(s, true); err != nil {
		_ = sock.Close()
		res.Status, res.Err = measure.Failure(ctx, measure.StepHandshake, err)
		return res
	}
	// The loop ends the query outstanding when ctx ends (a post of a started session).
	stop := context.AfterFunc(ctx, func() { _ = l.post(s, false) })
	<-s.done
	stop()
	if s.err != nil && res.Status == measure.StatusOK {
		res.Status, res.Err = measure.Failure(ctx, measure.StepHandshake, s.err)
	}
	return res
}

func (l *Loop) run() {
	defer close(l.done)
	for {
		l.mu.Lock()
		l.inbox, l.posted = l.posted, l.inbox[:0]
		closing := l.closing
		l.mu.Unlock()
		for _, s := range l.inbox {
			switch {
			case s.over:
			case !s.started:
				l.start(s)
			case s.outstanding: // its context is done: an answer already waiting still counts
				l.readable(s)
				if s.outstanding {
					l.expire(s)
				}
			}
		}
		clear(l.inbox)
		l.sendDue()
		if closing && len(l.active) == 0 {
			return
		}
		wait := time.Duration(-1) // until an answer
		if len(l.answered) > 0 {
			wait = max(0, loopBatchWait-time.Since(l.heldSince))
		}
		var err error
		if l.ready, err = l.p.WaitFor(l.ready[:0], wait); err != nil {
			l.fail(fmt.Errorf("DoUDP loop: %w", err))
			return
		}
		for _, key := range l.ready {
			if s := l.active[key]; s != nil {
				l.readable(s)
			}
		}
		l.sendDue()
	}
}

// fail ends every session when the poller failed: a query outstanding fails, and a
// session without one (not started, or between an answer and its next query) fails its
// Measure; later sessions fail at their start.
func (l *Loop) fail(err error) {
	l.mu.Lock()
	l.err = err
	posted := l.posted
	l.posted = nil
	l.mu.Unlock()
	for _, s := range l.active {
		if s.outstanding {
			s.out.Status, s.out.Err = measure.StatusError, err
			l.deliver(s, s.out)
		} else { // between an answer and its next query
			s.err = err
			l.end(s)
		}
	}
	for _, s := range posted {
		if !s.started && !s.over {
			s.err, s.over = err, true
			_ = s.sock.Close()
			close(s.done)
		}
	}
}

func (l *Loop) start(s *loopSession) {
	s.started = true
	l.active[s.key] = s
	l.next(s)
}

// next sends the session's next query, or ends the session when there is none.
func (l *Loop) next(s *loopSession) {
	q, ok := s.plan.Next(s.ctx, s.seq)
	if !ok {
		l.end(s)
		return
	}
	s.q = dnsmsg.Query{Name: q.Name, Type: q.Type, ID: measure.NewID(), RcodeOnly: q.RcodeOnly}
	s.out, s.lastBad = measure.Query{Seq: s.seq, KeepaliveTimeout: -1}, nil
	msg, err := dnsmsg.AppendBuild(l.msg[:0], s.q)
	if err != nil {
		s.out.Status, s.out.Err = measure.StatusError, err
		l.deliver(s, s.out)
		return
	}
	l.msg = msg
	if s.ctx.Err() != nil { // as a send on a socket whose deadline has passed
		s.out.StartedAt = time.Now()
		err = fmt.Errorf("%w: %v", context.DeadlineExceeded, os.ErrDeadlineExceeded)
	} else {
		s.out.StartedAt, err = s.sock.Send(msg)
	}
	if err != nil {
		s.out.Status, s.out.Err = measure.Failure(s.ctx, measure.StepAnswer, fmt.Errorf("send query: %w", err))
		l.deliver(s, s.out)
		return
	}
	s.outstanding = true
}

// readable reads the session's socket up to its query's answer, as measure's DoUDP
// client reads after its send:
// a datagram that is not the answer (wrong ID or garbage) may be an off-path injection
// (RFC 5452 §9.1), so the query keeps waiting for its answer.
func (l *Loop) readable(s *loopSession) {
	for s.outstanding {
		n, at, err := s.sock.Recv(l.buf)
		if errors.Is(err, kstamp.ErrWouldBlock) {
			return
		}
		if err != nil {
			s.out.Status, s.out.Err = measure.ReadFailure(s.ctx, s.lastBad, err)
			l.deliver(s, s.out)
			return
		}
		r := measure.CheckAnswer(s.out, s.q, l.buf[:n], measure.Arrival(at, s.out.StartedAt))
		if r.Status == measure.StatusOK || !errors.Is(r.Err, dnsmsg.ErrBadResponse) {
			// The next query is out (or the session over): no read that would find
			// nothing yet; a datagram already waiting makes the next Wait report the
			// socket again (level-triggered).
			l.deliver(s, r)
			return
		}
		s.lastBad = r.Err
	}
}

// expire ends the query outstanding when the session's context is done.
func (l *Loop) expire(s *loopSession) {
	s.out.Status, s.out.Err = measure.ReadFailure(s.ctx, s.lastBad, os.ErrDeadlineExceeded)
	l.deliver(s, s.out)
}

// deliver hands over one outcome, as measure's sessions do; the session goes on to its
// next query after an answer and ends after a failure, which is the session's status
// (its queries run one at a time: the first failure is the last outcome).
func (l *Loop) deliver(s *loopSession, q measure.Query) {
	s.outstanding = false
	s.plan.Deliver(q)
	if q.Status != measure.StatusOK {
		s.res.Status, s.res.Err = q.Status, q.Err
		l.end(s)
		return
	}
	s.seq++
	if len(l.answered) == 0 {
		l.heldSince = time.Now()
	}
	l.answered = append(l.answered, s)
}

// sendDue sends the next query of every session answered since the last send, when
// enough of them wait or the first has waited loopBatchWait (see Loop). The answers a
// Wait reported are read first, then the queries go out together, so a server sees them
// come in one burst rather than spread between reads.
func (l *Loop) sendDue() {
	if len(l.answered) == 0 ||
		len(l.answered)*loopBatchShare < len(l.active) && time.Since(l.heldSince) < loopBatchWait {
		return
	}
	for i, s := range l.answered {
		if !s.over {
			l.next(s)
		}
		l.answered[i] = nil
	}
	l.answered = l.answered[:0]
}

func (l *Loop) end(s *loopSession) {
	s.over = true
	delete(l.active, s.key)
	_ = s.sock.Close()
	close(s.done)
}
