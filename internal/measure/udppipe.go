package measure

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/kstamp"
)

const (
	// udpBatch bounds the datagrams of one sendmmsg/recvmmsg of a DoUDP session.
	udpBatch = 32
	// udpPipeBuf is the receive buffer per datagram of a DoUDP session with several
	// queries outstanding: more than the EDNS size its queries advertise
	// (dnsmsg.EDNSBufferSize), so an answer cut to it is a bad response.
	udpPipeBuf = 4096
)

// udpPending is one outstanding query of a udpPipe.
type udpPending struct {
	q        dnsmsg.Query
	out      Query
	deadline time.Time
	lastBad  error
	done     bool
}

// udpPipe runs a DoUDP session's queries with up to Streams outstanding on its one
// socket: a sender goroutine asks for queries (Request.Next, from that one goroutine)
// while slots are free and sends each burst with one sendmmsg; the receiving goroutine
// reads whatever answers are there with one recvmmsg, matches them by ID, and ends
// queries that ran out of QueryTimeout. A query starts just before the sendmmsg that
// carried it and ends at its answer's kernel receive time.
type udpPipe struct {
	conn *kstamp.PacketConn
	req  *Request
	qt   time.Duration

	slots chan struct{}

	mu      sync.Mutex
	pending map[uint16]*udpPending
	fifo    []*udpPending // send order = deadline order (one QueryTimeout for all)
	out     []Query
	failed  bool
	sent    bool // the sender has stopped
}

func udpPipeline(ctx context.Context, req *Request, res *Result, conn *kstamp.PacketConn) {
	qt := req.QueryTimeout
	if qt <= 0 {
		qt = req.timeout()
	}
	p := &udpPipe{conn: conn, req: req, qt: qt, slots: make(chan struct{}, req.streams()),
		pending: make(map[uint16]*udpPending, req.streams())}
	var wg sync.WaitGroup
	wg.Go(func() { p.send(ctx) })
	p.receive(ctx)
	wg.Wait()
	slices.SortFunc(p.out, func(a, b Query) int { return a.Seq - b.Seq })
	res.Queries = append(res.Queries, p.out...)
}

// finish records q's outcome and frees its slot (p.mu held).
func (p *udpPipe) finish(u *udpPending, q Query) {
	u.done = true
	delete(p.pending, u.q.ID)
	p.out = append(p.out, q)
	p.failed = p.failed || q.Status != StatusOK
	<-p.slots
}

// register gives u an ID no outstanding query uses and returns its wire form; a query
// that cannot be built fails at once.
func (p *udpPipe) register(u *udpPending) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := newID()
	for p.pending[id] != nil {
		id = newID()
	}
	u.q.ID = id
	msg, err := dnsmsg.Build(u.q)
	if err != nil {
		q := u.out
		q.Status, q.Err = StatusError, err
		p.finish(u, q)
		return nil, false
	}
	p.pending[id] = u
	return msg, true
}

func (p *udpPipe) stopped(ctx context.Context) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed || ctx.Err() != nil
}

// send asks for and sends queries while slots are free, until Next has no more, ctx
// ends or a query failed; then it wakes the receiver.
func (p *udpPipe) send(ctx context.Context) {
	var batch kstamp.Batch
	var msgs [][]byte
	var sending []*udpPending
	defer func() {
		p.mu.Lock()
		p.sent = true
		p.mu.Unlock()
		_ = p.conn.SetReadDeadline(time.Now()) // the receiver re-checks what is left
	}()
	for seq := 0; ; {
		msgs, sending = msgs[:0], sending[:0]
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		held, stop := 1, false
		// A burst: one query per free slot, up to udpBatch.
		for held > 0 {
			if p.stopped(ctx) {
				stop = true
				break
			}
			name, qtype, ok := p.req.next(ctx, seq)
			if !ok {
				stop = true
				break
			}
			held--
			u := &udpPending{q: dnsmsg.Query{Name: name, Type: qtype, RcodeOnly: p.req.RcodeOnly},
				out: Query{Seq: seq, KeepaliveTimeout: -1}}
			seq++
			if msg, ok := p.register(u); ok {
				msgs, sending = append(msgs, msg), append(sending, u)
			}
			if len(msgs) == udpBatch {
				break
			}
			select {
			case p.slots <- struct{}{}:
				held++
			default:
			}
		}
		for range held {
			<-p.slots
		}
		if len(msgs) > 0 {
			now := time.Now()
			p.mu.Lock()
			for _, u := range sending {
				u.out.StartedAt, u.deadline = now, now.Add(p.qt)
				p.fifo = append(p.fifo, u)
			}
			p.mu.Unlock()
			if n, err := p.conn.WriteBatch(&batch, msgs); err != nil {
				p.mu.Lock()
				for _, u := range sending[n:] {
					if !u.done {
						q := u.out
						q.Status, q.Err = Classify(err), fmt.Errorf("send query: %w", err)
						p.finish(u, q)
					}
				}
				p.mu.Unlock()
			}
		}
		if stop {
			return
		}
	}
}

// expire ends the outstanding queries whose time ran out (all of them when all is set,
// with readErr when the socket failed), oldest first (p.mu held).
func (p *udpPipe) expire(now time.Time, all bool, readErr error) {
	for len(p.fifo) > 0 {
		u := p.fifo[0]
		if !u.done {
			if readErr == nil && !all && now.Before(u.deadline) {
				return
			}
			q := u.out
			switch {
			case readErr != nil:
				q.Status, q.Err = Classify(readErr), readErr
			case u.lastBad != nil:
				q.Status, q.Err = StatusBadResponse, u.lastBad
			default:
				err := fmt.Errorf("%w: no answer", context.DeadlineExceeded)
				q.Status, q.Err = Classify(err), err
			}
			p.finish(u, q)
		}
		p.fifo[0] = nil
		p.fifo = p.fifo[1:]
	}
}

// receive reads answers until the sender has stopped and no query is outstanding.
func (p *udpPipe) receive(ctx context.Context) {
	n := min(udpBatch, cap(p.slots))
	var batch kstamp.Batch
	backing := make([]byte, n*udpPipeBuf)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = backing[i*udpPipeBuf : (i+1)*udpPipeBuf : (i+1)*udpPipeBuf]
	}
	dgs := make([]kstamp.Datagram, n)
	var readErr error
	over := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.sent && len(p.pending) == 0 && len(p.fifo) == 0
	}
	for {
		now := time.Now()
		p.mu.Lock()
		p.expire(now, ctx.Err() != nil, readErr)
		d := now.Add(p.qt)
		if len(p.fifo) > 0 {
			d = p.fifo[0].deadline
		}
		p.mu.Unlock()
		_ = p.conn.SetReadDeadline(d)
		// After the deadline is set: the sender's stop and ctx's end (which set the
		// deadline to now) either show here or cut the read short.
		if over() {
			return
		}
		if ctx.Err() != nil {
			_ = p.conn.SetReadDeadline(time.Now())
		}
		k, err := p.conn.ReadBatch(&batch, bufs, dgs)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) && readErr == nil {
				readErr = err
			}
			continue
		}
		now = time.Now()
		p.mu.Lock()
		for i, dg := range dgs[:k] {
			raw := bufs[i][:dg.N]
			if len(raw) < 2 {
				continue
			}
			u := p.pending[uint16(raw[0])<<8|uint16(raw[1])]
			if u == nil || u.out.StartedAt.IsZero() {
				continue // not an answer to an outstanding query: dropped
			}
			done := dg.At
			if done.IsZero() || done.After(now) {
				done = now
			}
			if done.Before(u.out.StartedAt) {
				done = u.out.StartedAt
			}
			if dg.Truncated {
				u.lastBad = fmt.Errorf("%w: answer longer than %d bytes", dnsmsg.ErrBadResponse, udpPipeBuf)
				continue
			}
			q := finishQuery(u.out, u.q, raw, done)
			if q.Status == StatusOK || !errors.Is(q.Err, dnsmsg.ErrBadResponse) {
				p.finish(u, q)
			} else {
				// Possibly injected (RFC 5452 §9.1): the query keeps waiting.
				u.lastBad = q.Err
			}
		}
		p.mu.Unlock()
	}
}
