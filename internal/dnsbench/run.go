package dnsbench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench/drive"
	"github.com/doqscan/doqscan/internal/dnsbench/h2fast"
	"github.com/doqscan/doqscan/internal/dnsbench/udploop"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/measure"
)

// rampMinSent is how many queries a second of a ramp needs before its loss counts.
const rampMinSent = 20

// maxLag bounds how far a paced run catches up after its workers were all busy: beyond
// it, the missed sends are dropped rather than sent as a burst.
const maxLag = 100 * time.Millisecond

// Run benchmarks every target of c in turn and returns one report per target. guard
// (nil: labnet.NewGuard()) must allow each address: a lab address from outside the
// testbed's namespaces is a *labnet.RefusedError before any packet. When ctx ends, Run
// returns the reports so far (the interrupted one included) with ctx's error.
func Run(ctx context.Context, c Config, guard *labnet.Guard, log *slog.Logger) ([]*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if guard == nil {
		guard = labnet.NewGuard()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, t := range c.Targets {
		if err := guard.Check(t.Addr.Addr()); err != nil {
			return nil, err
		}
	}
	var out []*Report
	for _, t := range c.Targets {
		log.Info("benchmark", "target", t.String(), "policy", c.Policy, "load", c.Load, "workers", c.Workers)
		r := runTarget(ctx, c, t, log)
		out = append(out, r)
		log.Info("done", "target", t.String(), "sent", r.Sent, "answered", r.Answered,
			"qps", fmt.Sprintf("%.1f", r.QPS), "success", fmt.Sprintf("%.4f", r.SuccessRate),
			"p50_ms", r.Latency.P50, "p99_ms", r.Latency.P99)
		if err := ctx.Err(); err != nil {
			return out, err
		}
	}
	return out, nil
}

type second struct {
	sent, done, ok int64
	lat            Histogram
	rate           float64 // the paced rate at the second's start (0: unpaced)
}

type bench struct {
	runKey string
	c      Config
	t      Target
	h2     func(net.Conn) (measure.HTTP2Conn, error) // DoH's HTTP/2 client (h2fast)
	start  time.Time

	stop     chan struct{} // closed when no more queries may be issued
	stopOnce sync.Once
	permits  chan struct{} // paced loads: one per query to issue
	issued   atomic.Int64

	mu        sync.Mutex
	seconds   []*second
	lat       Histogram // resolve time of answered queries (first packet -> answer)
	total     Histogram // issue -> answer, including any session set-up
	sent, ok  int64
	statuses  map[measure.Status]int64 // every outcome but ok (that is the count ok)
	errSample map[measure.Status]string
	// Answers by rcode: the header's 4-bit codes in an array, extended ones by name
	// (report merges them); no map update for each answer.
	rcodeN   [16]int64
	rcodes   map[string]int64
	lastDone time.Time
	ramp     *RampResult
	// onRecord, when set (tests), sees every outcome with its issue and outcome times.
	onRecord func(issued, done time.Time, q measure.Query)
}

func (b *bench) halt() { b.stopOnce.Do(func() { close(b.stop) }) }

func (b *bench) stopped() bool {
	select {
	case <-b.stop:
		return true
	default:
		return false
	}
}

// rateAt is the paced rate at elapsed time e (0: unpaced).
func (b *bench) rateAt(e time.Duration) float64 {
	switch b.c.Load {
	case LoadRate:
		return b.c.Rate
	case LoadRamp:
		r := b.c.RampMax * float64(e) / float64(b.c.Duration)
		return min(max(r, 1), b.c.RampMax)
	}
	return 0
}

func (b *bench) secondAt(t time.Time) *second {
	i := max(int(t.Sub(b.start)/time.Second), 0)
	for len(b.seconds) <= i {
		b.seconds = append(b.seconds, &second{rate: b.rateAt(time.Duration(len(b.seconds)) * time.Second)})
	}
	return b.seconds[i]
}

// gate waits for the right to issue one more query and returns it with its issue time.
func (b *bench) gate() (Question, time.Time, bool) {
	if b.permits != nil {
		select {
		case <-b.permits:
		case <-b.stop:
			return Question{}, time.Time{}, false
		}
	}
	if b.stopped() {
		return Question{}, time.Time{}, false
	}
	n := b.issued.Add(1)
	if b.c.Count > 0 && n >= b.c.Count {
		b.halt()
		if n > b.c.Count {
			return Question{}, time.Time{}, false
		}
	}
	now := time.Now()
	b.mu.Lock()
	b.sent++
	b.secondAt(now).sent++
	b.mu.Unlock()
	return b.c.Queries[(n-1)%int64(len(b.c.Queries))], now, true
}

// pace hands out permits at the configured rate until stop.
func (b *bench) pace() {
	next := b.start
	for {
		r := b.rateAt(time.Since(b.start))
		next = next.Add(time.Duration(float64(time.Second) / r))
		now := time.Now()
		if next.Before(now.Add(-maxLag)) {
			next = now.Add(-maxLag)
		}
		if d := next.Sub(now); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-b.stop:
				t.Stop()
				return
			}
		}
		select {
		case b.permits <- struct{}{}:
		case <-b.stop:
			return
		}
	}
}

// record adds one query's outcome. deadline is when the query's own bound ran out: an
// answer counts at its arrival, a failure when it was seen but never after its deadline,
// so work done after the outcome was known (closing the session, analysing its qlog, a
// busy machine's scheduling) delays neither the outcome nor the run's elapsed time.
func (b *bench) record(issued, deadline time.Time, q measure.Query) {
	var done time.Time
	if q.Status == measure.StatusOK {
		done = q.StartedAt.Add(q.Resolve)
	} else if done = time.Now(); done.After(deadline) {
		done = deadline
	}
	if b.onRecord != nil {
		b.onRecord(issued, done, q)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.secondAt(issued)
	s.done++
	if done.After(b.lastDone) {
		b.lastDone = done
	}
	if q.Status != measure.StatusOK {
		b.statuses[q.Status]++
		if _, ok := b.errSample[q.Status]; !ok && q.Err != nil {
			b.errSample[q.Status] = q.Err.Error()
		}
		return
	}
	b.ok++
	s.ok++
	s.lat.Record(q.Resolve)
	b.lat.Record(q.Resolve)
	b.total.Record(done.Sub(issued))
	if q.Rcode >= 0 && q.Rcode < len(b.rcodeN) {
		b.rcodeN[q.Rcode]++
	} else {
		b.rcodes[dnsmsg.RcodeName(q.Rcode)]++
	}
}

func (b *bench) request() *measure.Request {
	r := &measure.Request{
		Addr: b.t.Addr, ServerName: b.t.ServerName,
		Timeout: b.c.Timeout, Mode: b.c.Policy, KeyShare: b.c.KeyShare, Variant: b.t.Variant,
	}
	if b.t.Protocol == measure.DoQ {
		// Named, so that 0-RTT frames its early query with the resumed session's ALPN.
		r.ALPN = []string{doq.Versions[0].ALPN}
	}
	return r
}

// question is q as a session's query: only status and rcode are reported, so its
// answer is checked on its raw bytes, not unpacked.
func question(q Question) dnsmsg.Query {
	return dnsmsg.Query{Name: q.Name, Type: q.QType, RcodeOnly: true}
}

// measure runs req as one session of plan on b's protocol (drive.Measurer: measure's
// session set-up, timing and classification; no qlog to record, nor to analyse after a
// flooding server's exchange, since only the queries' outcomes count).
func (b *bench) measure(ctx context.Context, req *measure.Request, plan drive.Plan) *measure.Result {
	m, err := drive.Measurer(b.t.Protocol, b.h2, plan)
	if err != nil {
		return &measure.Result{Status: measure.StatusError, Err: err}
	}
	return m.Measure(ctx, req)
}

// once runs req as a session of the one query q and returns its outcome (the
// session's failure if it never ran).
func (b *bench) once(ctx context.Context, req *measure.Request, q Question) measure.Query {
	var out measure.Query
	ran := false
	res := b.measure(ctx, req, drive.Plan{
		Next: func(_ context.Context, seq int) (dnsmsg.Query, bool) { return question(q), seq == 0 },
		// One query, one at a time: delivered before Measure returns, from its goroutine.
		Deliver: func(o measure.Query) { out, ran = o, true },
	})
	if !ran {
		return measure.Query{Status: res.Status, Err: res.Err}
	}
	return out
}

// sessionWorker issues one query per exchange (fresh, resumed, 0rtt); resumed and
// 0-RTT workers warm their Peer with one uncounted exchange first.
func (b *bench) sessionWorker(ctx context.Context) {
	var peer *measure.Peer
	if b.c.Policy == measure.ModeResumed || b.c.Policy == measure.Mode0RTT {
		peer = measure.NewPeer()
		warm := b.request()
		warm.Peer = peer
		b.once(ctx, warm, b.c.Queries[0])
	}
	for {
		q, at, ok := b.gate()
		if !ok {
			return
		}
		req := b.request()
		req.Peer = peer
		b.record(at, at.Add(b.c.Timeout), b.once(ctx, req, q))
	}
}

// persistentWorker runs sessions of up to SessionQueries queries, a new one after a
// failure. With one stream, each query (the first with the session set-up) has Timeout
// to complete: when it runs out the session is cancelled and the query counts as a
// timeout. With Streams > 1 the session keeps up to Streams queries outstanding
// (drive.Plan.Streams): the set-up has Timeout, then each query has its own Timeout
// (drive.Plan.QueryTimeout), and a failed query ends the session once the queries
// outstanding on it have their outcomes.
func (b *bench) persistentWorker(ctx context.Context, loop *udploop.Loop) {
	streams := b.c.Streams > 1
	for {
		q0, at0, ok := b.gate()
		if !ok {
			return
		}
		// The session's queries issued and not yet recorded, by seq: each is recorded as
		// its outcome arrives (drive.Plan.Deliver), so a long session keeps none.
		var mu sync.Mutex
		open := map[int]issue{0: {at0, at0.Add(b.c.Timeout)}}
		last := 0 // the last seq issued
		sctx, cancel := context.WithCancel(ctx)
		var timedOut atomic.Bool
		timer := newWatchdog(at0.Add(b.c.Timeout), b.c.Timeout, func() { timedOut.Store(true); cancel() })
		// outcome records query seq's outcome q once (later ones are dropped).
		outcome := func(q measure.Query) {
			mu.Lock()
			is, ok := open[q.Seq]
			delete(open, q.Seq)
			isLast := q.Seq == last
			mu.Unlock()
			if !ok {
				return
			}
			if q.Status != measure.StatusOK && isLast && timedOut.Load() {
				q.Status, q.Err = measure.StatusTimeout, fmt.Errorf("no answer within %v: %v", b.c.Timeout, q.Err)
			}
			b.record(is.at, is.deadline, q)
		}
		req := b.request()
		req.Mode = measure.ModePersistent
		plan := drive.Plan{Deliver: outcome}
		// The session's own bound; each query is bounded by the timer above, or with
		// several streams by QueryTimeout.
		req.Timeout = b.c.Timeout * time.Duration(b.c.SessionQueries+1)
		if streams {
			plan.Streams, plan.QueryTimeout = b.c.Streams, b.c.Timeout
			// Unpaced: the queries of all free slots go out together.
			plan.Burst = b.c.Load == LoadMax
		}
		// Next is called from one goroutine (the session's), seq in order.
		plan.Next = func(_ context.Context, seq int) (dnsmsg.Query, bool) {
			if seq == 0 {
				if streams && timer.Stop() {
					// Set up in time: from here the first query has its own bound.
					mu.Lock()
					open[0] = issue{at0, time.Now().Add(b.c.Timeout)}
					mu.Unlock()
				}
				return question(q0), true
			}
			if !streams {
				timer.Pause() // waiting for the right to issue is no query's time
			}
			if seq >= b.c.SessionQueries {
				return dnsmsg.Query{}, false
			}
			q, at, ok := b.gate()
			if !ok {
				return dnsmsg.Query{}, false
			}
			mu.Lock()
			open[seq], last = issue{at, at.Add(b.c.Timeout)}, seq
			mu.Unlock()
			if !streams {
				timer.Set(at.Add(b.c.Timeout)) // the session's one timer, for this query
			}
			return question(q), true
		}
		var res *measure.Result
		if loop != nil {
			res = loop.Measure(sctx, req, plan)
		} else {
			res = b.measure(sctx, req, plan)
		}
		timer.Stop()
		cancel()
		// The session's first failure (already delivered: dropped here), then the issued
		// queries it never ran: they fail with the session.
		for _, q := range res.Queries {
			outcome(q)
		}
		mu.Lock()
		left := make([]int, 0, len(open))
		for seq := range open {
			left = append(left, seq)
		}
		mu.Unlock()
		slices.Sort(left)
		for _, seq := range left {
			q := measure.Query{Seq: seq, Status: res.Status, Err: res.Err}
			if q.Status == measure.StatusOK {
				q.Status, q.Err = measure.StatusError, fmt.Errorf("query not sent")
			}
			outcome(q)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// issue is when a query was issued and when its own bound runs out.
type issue struct{ at, deadline time.Time }

// watchRamp stops a ramp at the first complete second whose loss exceeds the threshold
// and keeps the highest answered rate of the seconds before it.
func (b *bench) watchRamp(done <-chan struct{}) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	next := 0
	for {
		select {
		case <-done:
			b.evalRamp(&next, true)
			return
		case <-t.C:
			if b.evalRamp(&next, false) {
				b.halt()
			}
		}
	}
}

// evalRamp judges the seconds that are over and fully answered (or timed out); final:
// the run is over, judge all but a partial last second.
func (b *bench) evalRamp(next *int, final bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := int(time.Since(b.start) / time.Second)
	for *next < len(b.seconds) && (*next < cur || final) {
		s := b.seconds[*next]
		if s.done < s.sent || b.ramp.Stopped {
			return false
		}
		*next++
		if s.sent < rampMinSent {
			continue
		}
		loss := 1 - float64(s.ok)/float64(s.sent)
		if loss > b.c.RampLoss {
			b.ramp.Stopped, b.ramp.StopSecond, b.ramp.StopRate, b.ramp.StopLoss = true, *next-1, s.rate, loss
			return true
		}
		if float64(s.ok) > b.ramp.MaxQPS {
			b.ramp.MaxQPS, b.ramp.MaxQPSRate = float64(s.ok), s.rate
		}
	}
	return false
}

func runTarget(ctx context.Context, c Config, t Target, log *slog.Logger) *Report {
	return newBench(c, t).run(ctx, log)
}

func newBench(c Config, t Target) *bench {
	b := &bench{runKey: newRunKey(), c: c, t: t, stop: make(chan struct{}),
		statuses: map[measure.Status]int64{}, errSample: map[measure.Status]string{}, rcodes: map[string]int64{}}
	if c.Load == LoadRamp {
		b.ramp = &RampResult{Max: c.RampMax, LossThreshold: c.RampLoss}
	}
	if t.Protocol == measure.DoH {
		// DoH on dnsbench's own HTTP/2 client, which costs less CPU per answer than
		// x/net's (the hourly measurement's).
		b.h2 = h2fast.Start
	}
	return b
}

// run drives the load against b's target and returns its report.
func (b *bench) run(ctx context.Context, log *slog.Logger) *Report {
	c := b.c
	b.start = time.Now()
	if c.Duration > 0 {
		tm := time.AfterFunc(c.Duration, b.halt)
		defer tm.Stop()
	}
	stopCtx := context.AfterFunc(ctx, b.halt)
	defer stopCtx()
	if c.Load != LoadMax {
		b.permits = make(chan struct{})
		go b.pace()
	}
	workersDone := make(chan struct{})
	rampDone := make(chan struct{})
	if b.ramp != nil {
		go func() { b.watchRamp(workersDone); close(rampDone) }()
	} else {
		close(rampDone)
	}
	if c.Progress > 0 {
		go b.progress(log, workersDone)
	}
	// Unpaced DoUDP with one query per worker: the workers' sessions on a loop per
	// CPU (GOMAXPROCS), not a goroutine each (their Next never waits: gate has no
	// permits to wait for).
	var loops []*udploop.Loop
	if b.t.Protocol == measure.DoUDP && c.Load == LoadMax && c.Policy == measure.ModePersistent && c.Streams <= 1 {
		for range min(runtime.GOMAXPROCS(0), c.Workers) {
			loop, err := udploop.New()
			if err != nil {
				if log != nil {
					log.Warn("DoUDP loop unavailable: one goroutine per worker instead", "err", err)
				}
				break
			}
			loops = append(loops, loop)
			defer func() { _ = loop.Close() }()
		}
	}
	var wg sync.WaitGroup
	for i := range c.Workers {
		var loop *udploop.Loop
		if len(loops) > 0 {
			loop = loops[i%len(loops)]
		}
		wg.Go(func() {
			if c.Policy == measure.ModePersistent {
				b.persistentWorker(ctx, loop)
			} else {
				b.sessionWorker(ctx)
			}
		})
	}
	wg.Wait()
	b.halt()
	close(workersDone)
	<-rampDone
	return b.report()
}

func (b *bench) progress(log *slog.Logger, done <-chan struct{}) {
	t := time.NewTicker(b.c.Progress)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			b.mu.Lock()
			sent, ok := b.sent, b.ok
			b.mu.Unlock()
			log.Info("progress", "target", b.t.String(), "elapsed", time.Since(b.start).Round(time.Second),
				"sent", sent, "answered", ok, "rate", formatRate(b.rateAt(time.Since(b.start))))
		}
	}
}
