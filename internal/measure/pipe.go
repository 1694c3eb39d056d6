package measure

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
)

// PipeBurst bounds the queries of one burst (Pipelining.Burst): one write of a
// transport (a DoUDP sendmmsg) carries at most this many.
const PipeBurst = 32

// pending is one outstanding query of a pipe.
type pending struct {
	q        dnsmsg.Query
	out      Query
	deadline time.Time
	lastBad  error
	done     bool
	wire     []byte // the query's message (memory kept when the pending is reused)
}

// Message is one message a pipe read: its bytes (valid until the next read), the
// kernel receive time of the packet that completed it (zero: none), and whether it was
// cut at the receive buffer (a bad response).
type Message struct {
	Raw       []byte
	At        time.Time
	Truncated bool
}

// PipeIO is a pipe's transport. Write sends whole query messages (framed by the
// transport) and returns how many went out; Read waits, until the read deadline, for
// at least one message and returns those it has.
type PipeIO struct {
	Write           func(msgs [][]byte) (int, error)
	Read            func() ([]Message, error)
	SetReadDeadline func(time.Time) error
}

// pipe runs a session's queries with up to Pipelining.Streams outstanding, answers
// matched by DNS ID: a sender goroutine asks for queries (Pipelining.Next, from that one
// goroutine) and, with Pipelining.Burst, as many as slots are free before it sends them
// with one write (DoUDP: one sendmmsg; DoTCP/DoT:
// the frames in one write, RFC 7766 §6.2.1.1); the receiving goroutine takes every
// message there is from one read (DoUDP: one recvmmsg), matches them by ID, and ends
// queries that ran out of QueryTimeout. A query starts just before the write that
// carried it and ends at its answer's kernel receive time. The first read error ends
// the session's reads: every query outstanding then fails with it.
type pipe struct {
	io        PipeIO
	pl        Pipelining
	qt        time.Duration
	keepalive bool // queries carry edns-tcp-keepalive (DoTCP/DoT: Request.TCPKeepalive)

	slots    chan struct{}
	sendDone chan struct{}

	mu      sync.Mutex
	pending map[uint16]*pending
	fifo    []*pending // send order = deadline order (one QueryTimeout for all), from head
	head    int
	free    []*pending // ended and out of fifo: reused for the next queries
	out     []Query    // outcomes not yet delivered (Pipelining.Deliver) or kept
	spare   []Query    // with Pipelining.Deliver: the other buffer of out
	failed  bool
	sent    bool // the sender has stopped
}

// runPipe runs pl's queries over pio (timeout: the exchange's) and returns their
// outcomes in seq order (with pl.Deliver: hands each to it from the receiving goroutine
// as it ends, and returns none).
func runPipe(ctx context.Context, pl Pipelining, timeout time.Duration, pio PipeIO, keepalive bool) []Query {
	qt := pl.QueryTimeout
	if qt <= 0 {
		qt = timeout
	}
	pl.Streams = max(pl.Streams, 1)
	p := &pipe{io: pio, pl: pl, qt: qt, keepalive: keepalive, slots: make(chan struct{}, pl.Streams),
		sendDone: make(chan struct{}), pending: make(map[uint16]*pending, pl.Streams)}
	go func() { p.send(ctx); close(p.sendDone) }()
	p.receive(ctx)
	<-p.sendDone
	if pl.Deliver != nil {
		p.deliver()
		return nil
	}
	slices.SortFunc(p.out, func(a, b Query) int { return a.Seq - b.Seq })
	return p.out
}

// tcpPipeline runs a DoTCP/DoT session's queries pipelined on c: each burst's frames in
// one write, answers read through a buffer (every complete message it holds after one
// read is taken; each carries the kernel time of the last segment that read consumed).
func tcpPipeline(ctx context.Context, pl Pipelining, timeout time.Duration, c *timedConn, keepalive bool) []Query {
	br := bufio.NewReaderSize(c, 2+65535)
	var wbuf []byte
	var msgs []Message
	discard := 0
	return runPipe(ctx, pl, timeout, PipeIO{
		Write: func(m [][]byte) (int, error) {
			wbuf = wbuf[:0]
			for _, b := range m {
				wbuf = binary.BigEndian.AppendUint16(wbuf, uint16(len(b)))
				wbuf = append(wbuf, b...)
			}
			if _, err := c.Write(wbuf); err != nil {
				return 0, err
			}
			return len(m), nil
		},
		Read: func() ([]Message, error) {
			_, _ = br.Discard(discard)
			discard = 0
			msgs = msgs[:0]
			// The first message may wait for the network; Peek keeps a partly read
			// message in the buffer when the read deadline cuts it short.
			l, err := br.Peek(2)
			if err != nil {
				if errors.Is(err, io.EOF) && br.Buffered() == 0 {
					return nil, fmt.Errorf("read length: %w", errClosedEarly)
				}
				return nil, tcpReadErr(err, 0)
			}
			n := int(binary.BigEndian.Uint16(l))
			if n < dnsHeaderLen {
				return nil, fmt.Errorf("%w: length %d", errBadLength, n)
			}
			b, err := br.Peek(2 + n)
			if err != nil {
				return nil, tcpReadErr(err, n)
			}
			at := c.log.ArrivedBy(time.Time{}, time.Now())
			msgs = append(msgs, Message{Raw: b[2:], At: at})
			off := 2 + n
			// Then every further complete message already buffered (no more reads).
			for br.Buffered() >= off+2 {
				b, _ := br.Peek(off + 2)
				n := int(binary.BigEndian.Uint16(b[off:]))
				if n < dnsHeaderLen || br.Buffered() < off+2+n {
					break
				}
				b, _ = br.Peek(off + 2 + n)
				msgs = append(msgs, Message{Raw: b[off+2:], At: at})
				off += 2 + n
			}
			discard = off
			return msgs, nil
		},
		SetReadDeadline: c.SetReadDeadline,
	}, keepalive)
}

// tcpReadErr is the error of a framed read cut short: the end of the stream inside an
// announced message is a bad length, anything else (a deadline) stays as it is.
func tcpReadErr(err error, announced int) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: announced %d bytes: %v", errBadLength, announced, err)
	}
	if announced > 0 {
		return fmt.Errorf("read message: %w", err)
	}
	return fmt.Errorf("read length: %w", err)
}

// finish records q's outcome and frees its slot (p.mu held).
func (p *pipe) finish(u *pending, q Query) {
	u.done = true
	delete(p.pending, u.q.ID)
	p.out = append(p.out, q)
	p.failed = p.failed || q.Status != StatusOK
	<-p.slots
}

// register gives u an ID no outstanding query uses and returns its wire form; a query
// that cannot be built fails at once.
func (p *pipe) register(u *pending) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := NewID()
	for p.pending[id] != nil {
		id = NewID()
	}
	u.q.ID = id
	msg, err := dnsmsg.AppendBuild(u.wire[:0], u.q)
	if err != nil {
		q := u.out
		q.Status, q.Err = StatusError, err
		p.finish(u, q)
		return nil, false
	}
	u.wire = msg
	p.pending[id] = u
	return msg, true
}

// newPending returns a pending for query seq, reusing one that ended if there is one:
// a pending leaves fifo once, after its outcome, and only the sender (this caller)
// holds it after that; its message memory is reused only after the write that sent it.
func (p *pipe) newPending(q dnsmsg.Query, seq int) *pending {
	p.mu.Lock()
	var u *pending
	if n := len(p.free); n > 0 {
		u, p.free[n-1] = p.free[n-1], nil
		p.free = p.free[:n-1]
	}
	p.mu.Unlock()
	if u == nil {
		u = new(pending)
	}
	*u = pending{q: dnsmsg.Query{Name: q.Name, Type: q.Type, TCPKeepalive: p.keepalive, RcodeOnly: q.RcodeOnly},
		out: Query{Seq: seq, KeepaliveTimeout: -1}, wire: u.wire[:0]}
	return u
}

func (p *pipe) stopped(ctx context.Context) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed || ctx.Err() != nil
}

// send asks for and sends queries while slots are free, until Next has no more, ctx
// ends or a query failed; then it wakes the receiver.
func (p *pipe) send(ctx context.Context) {
	var msgs [][]byte
	var sending []*pending
	defer func() {
		p.mu.Lock()
		p.sent = true
		p.mu.Unlock()
		_ = p.io.SetReadDeadline(time.Now()) // the receiver re-checks what is left
	}()
	for seq := 0; ; {
		msgs, sending = msgs[:0], sending[:0]
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		held, stop := 1, false
		// A burst: one query per free slot, up to PipeBurst.
		for held > 0 {
			if p.stopped(ctx) {
				stop = true
				break
			}
			q, ok := p.pl.Next(ctx, seq)
			if !ok {
				stop = true
				break
			}
			held--
			u := p.newPending(q, seq)
			seq++
			if msg, ok := p.register(u); ok {
				msgs, sending = append(msgs, msg), append(sending, u)
			}
			if len(msgs) == PipeBurst || !p.pl.Burst {
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
				p.push(u)
			}
			p.mu.Unlock()
			if n, err := p.io.Write(msgs); err != nil {
				p.mu.Lock()
				for _, u := range sending[n:] {
					if !u.done {
						q := u.out
						q.Status, q.Err = Failure(ctx, StepAnswer, fmt.Errorf("send query: %w", err))
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

// push appends u to fifo, first moving what is left of it to the front of its memory
// when that is full (so a session that is never empty does not grow it forever).
func (p *pipe) push(u *pending) {
	if len(p.fifo) == cap(p.fifo) && p.head > 0 {
		n := copy(p.fifo, p.fifo[p.head:])
		clear(p.fifo[n:])
		p.fifo, p.head = p.fifo[:n], 0
	}
	p.fifo = append(p.fifo, u)
}

// expire ends the outstanding queries whose time ran out (all of them when all is set,
// with readErr when the socket failed), oldest first (p.mu held).
func (p *pipe) expire(now time.Time, all bool, readErr error) {
	for p.head < len(p.fifo) {
		u := p.fifo[p.head]
		if !u.done {
			if readErr == nil && !all && now.Before(u.deadline) {
				return
			}
			q := u.out
			switch {
			case readErr != nil:
				q.Status, q.Err = Failure(context.Background(), StepAnswer, readErr)
			case u.lastBad != nil:
				q.Status, q.Err = StatusBadResponse, u.lastBad
			default: // the query's own deadline, or the session's
				q.Status, q.Err = StatusTimeout, &TimeoutError{Step: StepAnswer, Err: context.DeadlineExceeded}
			}
			p.finish(u, q)
		}
		p.fifo[p.head] = nil
		p.head++
		if p.head == len(p.fifo) {
			// Empty: the next queries reuse its memory from the start.
			p.fifo, p.head = p.fifo[:0], 0
		}
		p.free = append(p.free, u)
	}
}

// deliver hands the outcomes finished so far to Pipelining.Deliver (no-op without it).
func (p *pipe) deliver() {
	if p.pl.Deliver == nil {
		return
	}
	p.mu.Lock()
	out := p.out
	p.out, p.spare = p.spare[:0], nil
	p.mu.Unlock()
	for i := range out {
		p.pl.Deliver(out[i])
		out[i] = Query{}
	}
	p.mu.Lock()
	p.spare = out[:0]
	p.mu.Unlock()
}

// receive reads answers until the sender has stopped and no query is outstanding.
func (p *pipe) receive(ctx context.Context) {
	over := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.sent && len(p.pending) == 0 && p.head == len(p.fifo)
	}
	for {
		now := time.Now()
		p.mu.Lock()
		p.expire(now, ctx.Err() != nil, nil)
		d := now.Add(p.qt)
		if p.head < len(p.fifo) {
			d = p.fifo[p.head].deadline
		}
		p.mu.Unlock()
		p.deliver()
		_ = p.io.SetReadDeadline(d)
		// After the deadline is set: the sender's stop and ctx's end (which set the
		// deadline to now) either show here or cut the read short.
		if over() {
			return
		}
		if ctx.Err() != nil {
			_ = p.io.SetReadDeadline(time.Now())
		}
		msgs, err := p.io.Read()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			// The reads are over: no new query, and every one sent fails with err.
			// (Ending them frees the slots the sender may wait for.)
			p.mu.Lock()
			p.failed = true
			p.expire(time.Now(), true, err)
			p.mu.Unlock()
			<-p.sendDone
			p.mu.Lock()
			p.expire(time.Now(), true, err)
			p.mu.Unlock()
			return
		}
		now = time.Now()
		p.mu.Lock()
		for _, m := range msgs {
			if len(m.Raw) < 2 {
				continue
			}
			u := p.pending[uint16(m.Raw[0])<<8|uint16(m.Raw[1])]
			if u == nil || u.out.StartedAt.IsZero() {
				continue // not an answer to an outstanding query: dropped
			}
			done := m.At
			if done.IsZero() || done.After(now) {
				done = now
			}
			if done.Before(u.out.StartedAt) {
				done = u.out.StartedAt
			}
			if m.Truncated {
				u.lastBad = fmt.Errorf("%w: answer longer than the receive buffer (%d bytes)", dnsmsg.ErrBadResponse, len(m.Raw))
				continue
			}
			q := CheckAnswer(u.out, u.q, m.Raw, done)
			if q.Status == StatusOK || !errors.Is(q.Err, dnsmsg.ErrBadResponse) {
				p.finish(u, q)
			} else {
				// Possibly injected (RFC 5452 §9.1): the query keeps waiting.
				u.lastBad = q.Err
			}
		}
		p.mu.Unlock()
		p.deliver()
	}
}
