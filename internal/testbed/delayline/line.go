// Package delayline is the testbed's user-space delay line: it reads every IPv4 and IPv6 packet
// the router namespace routes into a TUN device, holds it for the one-way delay of its
// path (per internet-side address of either family, plus a per-vantage extra), drops it with the path's
// loss probability (seeded RNG) and writes it back into the TUN device, from where the
// kernel forwards it on. The kernel of the testbed machines has no netem, hence this.
//
// Structure: the TUN device is multi-queue (IFF_MULTI_QUEUE); the kernel spreads flows
// over the queues by a symmetric flow hash (both directions of a 5-tuple on one queue).
// Each queue has one worker: a single-threaded event loop on its own locked OS thread
// that reads whatever is queued (non-blocking), pushes each packet onto its own min-heap
// of pointer-free entries (deadline, sequence, buffer slot), writes every packet that is
// due, and then sleeps in ppoll until the next deadline or the next packet. Nothing is
// shared between workers but atomic counters and the path table: no locks, no
// cross-thread wake-ups. Buffers live in a per-worker slab allocated in chunks and
// recycled, so the steady state allocates nothing.
//
// Fewer wake-ups per packet (what costs CPU at 50,000 packets/s on two vCPUs, far more
// than copying): a lone packet is released at its deadline, but when several are due
// within Config.Quantum the worker wakes half a quantum after the first and releases
// everything due up to half a quantum later, so a dense stream costs at most one
// wake-up per quantum, not one per packet, and each packet leaves within ±quantum/2 of
// its deadline (zero on average). While the next release is less than two quanta away
// the worker does not watch the queue: packets arriving meanwhile are read at that
// release and their arrival time is taken as the midpoint of the interval in which they
// came (unbiased, capped at a quantum before the read). When the next release is
// further away (idle paths, a ping), the worker watches the queue and a packet's arrival
// wakes it at once.
//
// Go timers wake ~1 ms late on these machines; ppoll on a thread with 1 ns timer slack
// (and SCHED_FIFO, see Config.RealTime) wakes within tens of µs. Packets of one flow
// never overtake each other: the kernel keeps a 5-tuple on one queue, and within a
// worker, with jitter, a packet's deadline is at least its predecessor's of the same
// (source, destination, protocol).
package delayline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/testbed/netns"
)

const (
	// SlotSize is the buffer of one packet: the TUN MTU (1500) plus headroom. A read
	// that fills the whole buffer was truncated and is dropped.
	SlotSize = 2048
	// slabChunk is how many slots are allocated at once.
	slabChunk = 1024
	// DefaultMaxInFlight bounds the packets held at once (300 ms × 2 directions ×
	// 50,000 packets/s = 30,000; the default leaves room).
	DefaultMaxInFlight = 65536
	// flowSweepAt is the flow-table size above which expired entries are removed.
	flowSweepAt = 1 << 16
	// readBurst bounds the packets a worker reads before it releases what is due, so a
	// burst on the queue cannot make releases late.
	readBurst = 64
	// DefaultQuantum is Config.Quantum when 0. Measured (bench/delayline.sh, 2 vCPUs,
	// 50k packets/s, one queue): 50 µs: 0.16 wake-ups and 14.1 µs of line CPU per packet;
	// 100 µs: 0.13 and 13.7; 200 µs: 0.10 and 11.2 (each packet within ±quantum/2).
	DefaultQuantum = 100 * time.Microsecond
	// DefaultQueues is the number of TUN queues and workers when ServeConfig.Queues is
	// 0. One: on the 2-vCPU machines a second worker took the CPU the traffic's senders
	// need (50k packets/s offered: one queue forwarded 46-48k/s at 13 µs of CPU per
	// packet, two queues 29-30k/s at 22-26 µs, each worker seeing half as dense a stream
	// and waking more often per packet). Raise it on bigger machines.
	DefaultQueues = 1
)

// Queue is one queue of a packet device. One worker owns it: only that worker's thread
// calls Read, Write and Wait.
type Queue interface {
	// Read reads one packet if one is queued and returns ErrAgain otherwise (it never
	// waits).
	Read(b []byte) (int, error)
	// Write writes one packet back.
	Write(b []byte) (int, error)
	// Wait sleeps until timeout passes (negative: no timeout), a packet is queued (only
	// if watch is set) or the device is interrupted (ErrClosed). It reports whether it
	// returned for a queued packet.
	Wait(timeout time.Duration, watch bool) (bool, error)
}

// Device is what the line reads packets from and writes them back to: the multi-queue
// TUN device in production, an in-memory pipe in tests.
type Device interface {
	Queues() []Queue
	// Interrupt makes every current and future Wait return ErrClosed.
	Interrupt()
	// Close releases the device; the line calls it after its workers stopped.
	Close() error
}

// ErrAgain is returned by Queue.Read when no packet is queued.
var ErrAgain = errors.New("no packet queued")

// ErrClosed is returned by Wait after Interrupt and by Read and Write after Close.
var ErrClosed = errors.New("delay line device closed")

// Config configures a Line.
type Config struct {
	Paths Paths // required
	// Vantage[i] is an extra one-way delay for packets to or from 198.18.i.0/24.
	Vantage map[int]time.Duration
	// Seed seeds the loss and jitter RNG of each queue (queue i: Seed and i). With one
	// queue, the same seed and packet sequence give the same drops and jitter; with
	// several, each queue's decisions are deterministic given the packets it reads, but
	// which queue a flow lands on depends on the kernel's per-boot flow-hash key.
	Seed        uint64
	MaxInFlight int // 0: DefaultMaxInFlight
	// Lead releases packets this much before their deadline to cancel the wake-up
	// latency of the worker and the path's fixed forwarding cost; 0 releases at or
	// after it.
	Lead time.Duration
	// Quantum: packets due within a quantum of each other are released by one wake-up,
	// each within ±Quantum/2 of its deadline, and arrivals are detected within about a
	// quantum under load (see the package comment). 0: DefaultQuantum; negative: none
	// (one wake-up per distinct deadline, every arrival watched).
	Quantum time.Duration
	// RealTime runs the worker threads under SCHED_FIFO (needs root or CAP_SYS_NICE;
	// silently not applied otherwise): on a loaded machine a normal thread waits for a
	// CPU for milliseconds, which no timer precision can make up for.
	RealTime bool
	Log      *slog.Logger
}

// rtPriority is the SCHED_FIFO priority of the line's threads (1..99; low, so kernel
// threads and anything more urgent still win; RT throttling leaves 5% to the rest).
const rtPriority = 10

func (l *Line) realtime(role string) {
	if !l.cfg.RealTime {
		return
	}
	err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: rtPriority}, 0)
	if err != nil {
		l.cfg.Log.Warn("delayline: SCHED_FIFO not applied; timing will suffer under load", "thread", role, "err", err)
	}
}

// Stats are the counters of a running line.
type Stats struct {
	Received  uint64 `json:"received"`
	Forwarded uint64 `json:"forwarded"`
	Lost      uint64 `json:"lost"`      // emulated loss
	Dropped   uint64 `json:"dropped"`   // not IPv4 or IPv6, malformed, truncated, or over MaxInFlight
	Overflow  uint64 `json:"overflow"`  // part of Dropped: over MaxInFlight
	InFlight  int    `json:"in_flight"` // held now
	MaxHeld   int    `json:"max_held"`  // most held at once
	// Lateness of each release against its deadline (negative with Lead: early).
	LateMeanNS int64  `json:"late_mean_ns"`
	LateMaxNS  int64  `json:"late_max_ns"`
	LateSumNS  int64  `json:"late_sum_ns"` // with Releases: means over an interval (differences)
	Releases   int64  `json:"releases"`
	LateOver   uint64 `json:"late_over_100us"` // releases more than 100 µs late
	WriteErrs  uint64 `json:"write_errors"`
	Queues     int    `json:"queues"`
	// Wakeups counts the workers' returns from Wait (what the line costs the machine
	// beyond copying: divide by Received for wake-ups per packet).
	Wakeups uint64 `json:"wakeups"`
}

type entry struct {
	due  int64 // monotonic ns
	seq  uint64
	slot int32
	n    int32
}

type flowKey struct {
	src, dst [16]byte // IPv4 addresses as IPv4-mapped IPv6 (As16)
	proto    uint8
}

// counters of one worker (atomics: Stats reads them from another thread).
type counters struct {
	received, forwarded, lost, dropped, overflow, lateOver, writeErrs, wakeups atomic.Uint64
	lateSum, lateCount, lateMax                                                atomic.Int64
	_                                                                          [64]byte // no false sharing between workers
}

// worker owns one queue: its heap, slab, RNG and flow table are touched by its thread only.
type worker struct {
	q     Queue
	heap  []entry
	slab  [][]byte // chunks of slabChunk*SlotSize
	free  []int32
	seq   uint64
	rng   *rand.Rand
	flows map[flowKey]int64
	c     counters
}

// Line is a delay line. Create it with New, run it with Run.
type Line struct {
	cfg     Config
	paths   atomic.Pointer[pathsBox]
	dev     Device
	clock   clock
	workers []*worker

	stopped           atomic.Bool
	inFlight, maxHeld atomic.Int64
}

type pathsBox struct {
	p       Paths
	vantage map[int]time.Duration
}

// New prepares a line on dev (one worker per queue).
func New(dev Device, cfg Config) (*Line, error) {
	if cfg.Paths == nil {
		return nil, errors.New("delayline: Config.Paths is required")
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Quantum == 0 {
		cfg.Quantum = DefaultQuantum
	}
	if cfg.Quantum < 0 {
		cfg.Quantum = 0
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	qs := dev.Queues()
	if len(qs) == 0 {
		return nil, errors.New("delayline: device has no queues")
	}
	l := &Line{cfg: cfg, dev: dev, clock: newClock()}
	for i, q := range qs {
		s := cfg.Seed + uint64(i)*0x9e3779b97f4a7c15
		l.workers = append(l.workers, &worker{q: q, flows: map[flowKey]int64{},
			rng: rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))})
	}
	l.SetPaths(cfg.Paths, cfg.Vantage)
	return l, nil
}

// SetPaths replaces the path table while the line runs (packets already held keep
// their deadline).
func (l *Line) SetPaths(p Paths, vantage map[int]time.Duration) {
	l.paths.Store(&pathsBox{p: p, vantage: vantage})
}

// Stats returns a snapshot of the counters.
func (l *Line) Stats() Stats {
	s := Stats{InFlight: int(l.inFlight.Load()), MaxHeld: int(l.maxHeld.Load()), Queues: len(l.workers)}
	for _, w := range l.workers {
		c := &w.c
		s.Received += c.received.Load()
		s.Forwarded += c.forwarded.Load()
		s.Lost += c.lost.Load()
		s.Dropped += c.dropped.Load()
		s.Overflow += c.overflow.Load()
		s.LateOver += c.lateOver.Load()
		s.WriteErrs += c.writeErrs.Load()
		s.Wakeups += c.wakeups.Load()
		s.LateSumNS += c.lateSum.Load()
		s.Releases += c.lateCount.Load()
		s.LateMaxNS = max(s.LateMaxNS, c.lateMax.Load())
	}
	if s.Releases > 0 {
		s.LateMeanNS = s.LateSumNS / s.Releases
	}
	return s
}

// Run moves packets until ctx is done or a queue fails. It closes the device.
func (l *Line) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errc := make(chan error, len(l.workers))
	for _, w := range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.work(w); err != nil {
				errc <- err
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	case <-allDone:
	}
	l.stopped.Store(true)
	l.dev.Interrupt()
	<-allDone
	cerr := l.dev.Close()
	if err == nil && ctx.Err() == nil {
		err = cerr
	}
	return err
}

// work is one queue's event loop: read what is queued, release what is due, sleep.
func (l *Line) work(w *worker) error {
	runtime.LockOSThread() // never unlocked: the thread may be SCHED_FIFO; it exits with us
	l.realtime("queue")
	// 1 ns timer slack: the default 50 µs slack would delay every wake-up.
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	lead, quantum := int64(l.cfg.Lead), int64(l.cfg.Quantum)
	// lastEmpty is when the queue was last known empty: a packet read at r arrived in
	// (lastEmpty, r], and its arrival is taken as the midpoint.
	lastEmpty := l.clock.now()
	slot := w.alloc()
	for !l.stopped.Load() {
		pb := l.paths.Load()
		drained := false
		for range readBurst {
			buf := w.buf(slot)
			n, err := w.q.Read(buf)
			if err != nil {
				if errors.Is(err, ErrAgain) {
					lastEmpty = l.clock.now()
					drained = true
					break
				}
				return l.readErr(err)
			}
			r := l.clock.now()
			// The midpoint, but never more than a quantum before the read: after a
			// long busy spell (the queue never seen empty) the packet may have waited
			// long, but releasing it early would be worse than late.
			arrival := r - min((r-lastEmpty)/2, quantum)
			w.c.received.Add(1)
			h, perr := ParsePacket(buf[:n])
			if perr != nil || n >= SlotSize {
				w.c.dropped.Add(1)
				continue // reuse the slot
			}
			if l.inFlight.Load() >= int64(l.cfg.MaxInFlight) {
				w.c.dropped.Add(1)
				w.c.overflow.Add(1)
				continue
			}
			due, lost := w.decide(pb, h, arrival, lead)
			if lost {
				w.c.lost.Add(1)
				continue
			}
			w.push(entry{due: due, seq: w.seq, slot: slot, n: int32(n)})
			w.seq++
			if held := l.inFlight.Add(1); held > l.maxHeld.Load() {
				l.maxHeld.Store(held)
			}
			slot = w.alloc()
		}
		now := l.clock.now()
		if len(w.heap) > 0 && w.heap[0].due <= now {
			l.release(w, now+quantum/2, lead)
		}
		if !drained {
			continue // more queued: read on before sleeping
		}
		timeout := time.Duration(-1)
		watch := true
		if len(w.heap) > 0 {
			now = l.clock.now()
			target := w.heap[0].due
			if w.dense(target + quantum) {
				// Another packet is due within a quantum: wake half a quantum after
				// the first and release up to half a quantum ahead (each packet within
				// ±quantum/2 of its deadline, zero on average).
				target += quantum / 2
			}
			left := target - now
			if left <= 0 {
				continue
			}
			timeout = time.Duration(left)
			// While the next release is near, arrivals wait for it (see the package comment).
			watch = left > 2*quantum
		}
		_, err := w.q.Wait(timeout, watch)
		w.c.wakeups.Add(1)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return nil
			}
			return fmt.Errorf("delayline: wait: %w", err)
		}
		if watch {
			// Watched: the queue was empty until now, or a packet has just woken us.
			lastEmpty = l.clock.now()
		}
	}
	return nil
}

// dense reports whether a second held packet is due at or before t (the second
// smallest entry of the heap is one of the root's children).
func (w *worker) dense(t int64) bool {
	h := w.heap
	return (len(h) > 1 && h[1].due <= t) || (len(h) > 2 && h[2].due <= t)
}

// release writes every held packet due at or before until, earliest first.
func (l *Line) release(w *worker, until, lead int64) {
	var lateSum, lateMax, released int64
	var over, werr uint64
	for len(w.heap) > 0 && w.heap[0].due <= until {
		e := w.pop()
		if _, err := w.q.Write(w.buf(e.slot)[:e.n]); err != nil {
			werr++
		}
		late := l.clock.now() - (e.due + lead)
		lateSum += late
		lateMax = max(lateMax, late)
		if late > int64(100*time.Microsecond) {
			over++
		}
		w.free = append(w.free, e.slot)
		released++
	}
	l.inFlight.Add(-released)
	w.c.forwarded.Add(uint64(released) - werr)
	w.c.writeErrs.Add(werr)
	w.c.lateOver.Add(over)
	w.c.lateSum.Add(lateSum)
	w.c.lateCount.Add(released)
	if lateMax > w.c.lateMax.Load() {
		w.c.lateMax.Store(lateMax)
	}
}

func (l *Line) readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, ErrClosed) {
		return nil
	}
	return fmt.Errorf("delayline: read: %w", err)
}

// decide returns the release deadline of a packet that arrived at arrival, or lost.
func (w *worker) decide(pb *pathsBox, h Header, arrival, lead int64) (due int64, lost bool) {
	inet, vant := h.Dst, h.Src
	if !isInternet(inet) {
		inet, vant = h.Src, h.Dst
	}
	var prof Profile
	if isInternet(inet) {
		prof = pb.p.Lookup(inet)
	}
	delay := prof.OneWay
	if v, ok := vantageIndex(vant); ok {
		delay += pb.vantage[v]
	}
	if prof.Loss > 0 && w.rng.Float64() < prof.Loss {
		return 0, true
	}
	if prof.Jitter > 0 {
		delay += time.Duration((2*w.rng.Float64() - 1) * float64(prof.Jitter))
		if delay < 0 {
			delay = 0
		}
	}
	due = arrival + int64(delay) - lead
	if prof.Jitter > 0 || len(w.flows) > 0 {
		// Per-flow FIFO: never release before the previous packet of the flow.
		k := flowKey{src: h.Src.As16(), dst: h.Dst.As16(), proto: h.Proto}
		if last, ok := w.flows[k]; ok && due <= last {
			due = last + 1
		}
		if prof.Jitter > 0 {
			w.flows[k] = due
		}
		if len(w.flows) > flowSweepAt {
			for k, last := range w.flows {
				if last < arrival {
					delete(w.flows, k)
				}
			}
		}
	}
	return due, false
}

// isInternet reports whether a is the far side of a path: the simulated internet
// (either family) or the central database's link (netns.DBPrefix).
func isInternet(a netip.Addr) bool {
	return netns.InternetPrefix.Contains(a) || netns.InternetPrefix6.Contains(a) || netns.DBPrefix.Contains(a)
}

// vantageIndex returns the vantage whose link holds a (198.18.i.0/24, 2001:2:0:i::/64).
func vantageIndex(a netip.Addr) (int, bool) {
	switch {
	case netns.VantagePrefix.Contains(a):
		return int(a.As4()[2]), true
	case netns.VantagePrefix6.Contains(a):
		return int(a.As16()[7]), true
	}
	return 0, false
}

func (w *worker) buf(slot int32) []byte {
	c, i := int(slot)/slabChunk, int(slot)%slabChunk
	return w.slab[c][i*SlotSize : (i+1)*SlotSize : (i+1)*SlotSize]
}

// alloc returns a free buffer slot, adding a chunk when none is free (the line bounds
// the packets held, so the slab stops growing at MaxInFlight plus a chunk per worker).
func (w *worker) alloc() int32 {
	if n := len(w.free); n > 0 {
		s := w.free[n-1]
		w.free = w.free[:n-1]
		return s
	}
	base := int32(len(w.slab) * slabChunk)
	w.slab = append(w.slab, make([]byte, slabChunk*SlotSize))
	for i := int32(slabChunk - 1); i > 0; i-- {
		w.free = append(w.free, base+i)
	}
	return base
}

// The heap is ordered by (due, seq): equal deadlines leave in arrival order.
func less(a, b entry) bool { return a.due < b.due || (a.due == b.due && a.seq < b.seq) }

func (w *worker) push(e entry) {
	h := append(w.heap, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	w.heap = h
}

func (w *worker) pop() entry {
	h := w.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && less(h[c+1], h[c]) {
			c++
		}
		if !less(h[c], h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	w.heap = h
	return top
}

// clock reads CLOCK_MONOTONIC (the clock ppoll's timeouts run on) through Go's
// vDSO-backed monotonic time: one clock_gettime at start, then time.Since.
type clock struct {
	base  int64
	start time.Time
}

func newClock() clock {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return clock{base: ts.Nano(), start: time.Now()}
}

func (c clock) now() int64 { return c.base + int64(time.Since(c.start)) }
