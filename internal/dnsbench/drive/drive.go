// Package drive runs the queries of dnsbench's sessions: queries asked for one at a
// time from the load (Plan.Next), each outcome handed over as soon as it is known
// (Plan.Deliver) so that a long session keeps none, several outstanding at once
// (Plan.Streams), sent in bursts when the load is unpaced (Plan.Burst). The sessions are
// measure's (measure.Load): set up, timed and classified as the hourly measurement's
// are; only the way their queries are driven is the load generator's.
package drive

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/measure"
)

// Plan is how one session runs its queries.
type Plan struct {
	// Next gives query seq (from 0; its name and type, and RcodeOnly: only its status
	// and rcode are needed, so its answer is checked on its raw bytes); ok false ends
	// the session there (before the first query: a session without queries). It is
	// called from one goroutine, seq in order, also while earlier queries are
	// outstanding (Streams > 1). It may block, as a paced load does, and must return
	// promptly once ctx is done.
	Next func(ctx context.Context, seq int) (q dnsmsg.Query, ok bool)
	// Deliver receives each query's outcome as soon as it is known. It may be called
	// from several goroutines at once, in any seq order, and never after the session's
	// Measure returns.
	Deliver func(measure.Query)
	// Streams, persistent mode: how many queries may be outstanding at once (<= 1: one
	// after another, the first failure ends the session). With more, DoUDP pipelines
	// them on its socket (sendmmsg/recvmmsg, udp.go), DoTCP and DoT on their stream
	// (measure.Session.Pipeline), the others run concurrent exchanges (a DoQ stream, an
	// HTTP request each); after a failure no new query is asked for.
	Streams int
	// QueryTimeout bounds each query when Streams > 1 (0: the request's Timeout).
	QueryTimeout time.Duration
	// Burst, with Streams > 1 on DoUDP/DoTCP/DoT: Next returns at once (an unpaced
	// load), so a query is asked for per free slot and they are sent together (one
	// sendmmsg, or one write; see measure.Pipelining.Burst).
	Burst bool
}

// Measurer returns protocol p's client (measure.Load: no qlog; DoH on h2's HTTP/2
// connections, nil: x/net's) whose sessions run plan's queries.
func Measurer(p measure.Protocol, h2 func(net.Conn) (measure.HTTP2Conn, error), plan Plan) (measure.Measurer, error) {
	return measure.Load(p, plan.drive, h2)
}

// drive is plan's measure.Driver: it delivers every outcome and returns the session's
// first failure (lowest seq) for the exchange's status, none when all were answered.
func (plan Plan) drive(ctx context.Context, s *measure.Session) []measure.Query {
	var (
		mu        sync.Mutex
		failed    measure.Query
		hasFailed bool
	)
	deliver := func(q measure.Query) {
		if q.Status != measure.StatusOK {
			mu.Lock()
			if !hasFailed || q.Seq < failed.Seq {
				failed, hasFailed = q, true
			}
			mu.Unlock()
		}
		plan.Deliver(q)
	}
	streams := 1
	if s.Request().Mode == measure.ModePersistent && plan.Streams > 1 {
		streams = plan.Streams
	}
	switch {
	case streams == 1:
		for i := 0; ; i++ {
			q, ok := plan.Next(ctx, i)
			if !ok {
				break
			}
			out := s.Exchange(ctx, i, q, false)
			deliver(out)
			if out.Status != measure.StatusOK {
				break
			}
		}
	case s.PacketConn() != nil:
		udpPipeline(ctx, s, measure.Pipelining{Streams: streams, QueryTimeout: plan.QueryTimeout, Next: plan.Next, Deliver: deliver, Burst: plan.Burst})
	case s.Pipelined():
		s.Pipeline(ctx, measure.Pipelining{Streams: streams, QueryTimeout: plan.QueryTimeout, Next: plan.Next, Deliver: deliver, Burst: plan.Burst})
	default:
		s.Concurrent(ctx, measure.Pipelining{Streams: streams, QueryTimeout: plan.QueryTimeout, Next: plan.Next, Deliver: deliver})
	}
	mu.Lock()
	defer mu.Unlock()
	if hasFailed {
		return []measure.Query{failed}
	}
	return nil
}
