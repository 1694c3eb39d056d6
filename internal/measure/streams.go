package measure

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/kstamp"
)

// Session is one session a Measure call has set up (DoUDP: its socket), handed to the
// client's Driver to run its queries on.
type Session struct {
	req *Request
	ex  exchangeFunc
	// pipe runs pipelined queries (DoTCP, DoT: answers matched by ID, pipe.go); nil for
	// the protocols whose queries run concurrently through ex.
	pipe func(ctx context.Context, p Pipelining) []Query
	// udp is DoUDP's socket: its queries go one after another through ex, or pipelined
	// over a transport of the driver's on it (PipelineOver).
	udp *kstamp.PacketConn
}

// Request is the request the session was set up for.
func (s *Session) Request() *Request { return s.req }

// Exchange runs q (its name and type; RcodeOnly: answers checked on their raw bytes,
// see dnsmsg.Check) as query seq of the session, its DNS ID as the protocol sets it.
// shared: other queries are outstanding on the session at the same time, so the
// session's write log (kstamp.Log.Arm/SentAt) cannot tell which write was this
// query's: its resolve time then starts just before its first write.
func (s *Session) Exchange(ctx context.Context, seq int, q dnsmsg.Query, shared bool) Query {
	return s.ex(ctx, seq, q, shared)
}

// Pipelined reports whether the session's queries can be pipelined (Pipeline): DoTCP
// and DoT, whose queries from concurrent Exchange calls would share one byte stream.
func (s *Session) Pipelined() bool { return s.pipe != nil }

// PacketConn is a DoUDP session's connected socket (nil for the other protocols).
// Concurrent Exchange calls on it would read each other's answers: queries outstanding
// together go through PipelineOver.
func (s *Session) PacketConn() *kstamp.PacketConn { return s.udp }

// PipelineOver runs queries as Pipeline does, over io: a transport of the caller's on
// the session's socket (PacketConn), sending and reading its own datagrams (without
// edns-tcp-keepalive).
func (s *Session) PipelineOver(ctx context.Context, p Pipelining, io PipeIO) []Query {
	return runPipe(ctx, p, s.req.timeout(), io, false)
}

// Pipelining is how Pipeline runs a session's queries.
type Pipelining struct {
	// Streams is how many queries may be outstanding at once.
	Streams int
	// QueryTimeout bounds each query (0: the exchange's Timeout).
	QueryTimeout time.Duration
	// Next gives query seq (name, type, RcodeOnly; ok false: no more), called from one
	// goroutine, seq in order.
	Next func(ctx context.Context, seq int) (q dnsmsg.Query, ok bool)
	// Deliver, when set, receives each outcome as soon as it is known (from the
	// receiving goroutine) in place of Pipeline's result.
	Deliver func(Query)
	// Burst: Next returns at once (an unpaced load), so a query is asked for per free
	// slot, up to PipeBurst, and they are sent together (one write); a query's start is
	// then taken before that write. Without Burst each query is sent as soon as Next
	// returns it.
	Burst bool
}

// Pipeline runs queries on a pipelined session (Pipelined) with up to p.Streams
// outstanding, answers matched by DNS ID (RFC 7766 §6.2.1.1), until p.Next has no more,
// ctx ends or a query failed, and returns their outcomes in seq order (none with
// p.Deliver). It returns nil on a session that cannot pipeline.
func (s *Session) Pipeline(ctx context.Context, p Pipelining) []Query {
	if s.pipe == nil {
		return nil
	}
	return s.pipe(ctx, p)
}

// Concurrent runs queries on a session whose exchanges may overlap (DoQ's streams,
// DoH's and DoH3's requests) with up to p.Streams outstanding, each bounded by
// p.QueryTimeout, asking p.Next for none after a failure; p.Deliver receives each
// outcome as it ends. It returns once every query it started has its outcome.
func (s *Session) Concurrent(ctx context.Context, p Pipelining) {
	qt := p.QueryTimeout
	if qt <= 0 {
		qt = s.req.timeout()
	}
	concurrent(ctx, max(p.Streams, 1), qt, p.Next, s.ex, p.Deliver)
}

// Driver runs the queries of a session Measure set up and returns the outcomes that
// go into Result.Queries (the exchange's Status is the first failure among them, else
// ok). For's measures Request's queries (Name/Queries or Next, Streams,
// QueryTimeout); a load generator brings its own (Load).
type Driver func(ctx context.Context, s *Session) []Query

// Load returns protocol p's client whose sessions, set up, timed and classified as
// For(p)'s, run their queries through drive, record no qlog (Result.Qlog stays empty,
// nothing is analysed after the exchange; the handshake time then comes from the
// kernel stamps or the wall clock) and, for DoH, run on the HTTP/2 client connections
// h2 starts (nil: x/net's, as For(DoH)). This is the client of a load generator, which
// needs only the queries' outcomes; the hourly measurement runs For's.
func Load(p Protocol, drive Driver, h2 func(net.Conn) (HTTP2Conn, error)) (Measurer, error) {
	m, err := For(p)
	if err != nil {
		return nil, err
	}
	if drive == nil {
		return nil, fmt.Errorf("load client of %s: no driver", p)
	}
	mm := m.(measurer)
	mm.c = client{drive: drive, noQlog: true, h2: h2}
	return mm, nil
}

// streams is how many of the session's queries may be outstanding at once.
func (r *Request) streams() int {
	if r.Mode == ModePersistent && r.Streams > 1 {
		return r.Streams
	}
	return 1
}

// exchangeFunc runs one query of a session: seq, its question, bounded by ctx (see
// Session.Exchange).
type exchangeFunc func(ctx context.Context, seq int, q dnsmsg.Query, shared bool) Query

// drive is For's Driver: req's queries, pipelined on DoTCP/DoT with Streams > 1, one
// after another on DoUDP, else through runQueries.
func drive(ctx context.Context, s *Session) []Query {
	req := s.req
	next := func(ctx context.Context, seq int) (dnsmsg.Query, bool) {
		name, qtype, ok := req.NextQuery(ctx, seq)
		return dnsmsg.Query{Name: name, Type: qtype}, ok
	}
	n := req.streams()
	if s.pipe != nil && n > 1 {
		return s.pipe(ctx, Pipelining{Streams: n, QueryTimeout: req.QueryTimeout, Next: next})
	}
	if s.udp != nil {
		n = 1
	}
	return runQueries(ctx, req, n, s.ex, next)
}

// runQueries runs req's queries on one session through ex and returns their outcomes
// in seq order. With n = 1 they run one after another and the first failure ends the
// session. With n > 1 up to n are outstanding at once, each bounded by QueryTimeout (0: the exchange's Timeout); after a failure no new query is asked
// for, and runQueries returns once every query it started has its outcome.
func runQueries(ctx context.Context, req *Request, n int, ex exchangeFunc, next func(context.Context, int) (dnsmsg.Query, bool)) []Query {
	var out []Query
	if n == 1 {
		for i := 0; ; i++ {
			q, ok := next(ctx, i)
			if !ok {
				return out
			}
			r := ex(ctx, i, q, false)
			out = append(out, r)
			if r.Status != StatusOK {
				return out
			}
		}
	}
	qt := req.QueryTimeout
	if qt <= 0 {
		qt = req.timeout()
	}
	var mu sync.Mutex
	concurrent(ctx, n, qt, next, ex, func(r Query) {
		mu.Lock()
		out = append(out, r)
		mu.Unlock()
	})
	slices.SortFunc(out, func(a, b Query) int { return a.Seq - b.Seq })
	return out
}

// concurrent runs up to n exchanges through ex at once, each bounded by qt, asking next
// for none after a failure, hands each outcome to deliver as it ends, and returns once
// every query it started has its outcome.
func concurrent(ctx context.Context, n int, qt time.Duration, next func(context.Context, int) (dnsmsg.Query, bool),
	ex exchangeFunc, deliver func(Query)) {
	var (
		mu     sync.Mutex
		failed bool
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
		q, ok := next(ctx, i)
		if !ok {
			break
		}
		// A query asked for is always run (on a failed session it fails at once): its
		// caller counted it as issued.
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, qt)
			r := ex(qctx, i, q, true)
			cancel()
			mu.Lock()
			failed = failed || r.Status != StatusOK
			mu.Unlock()
			deliver(r)
			<-slots
		})
	}
	wg.Wait()
}
