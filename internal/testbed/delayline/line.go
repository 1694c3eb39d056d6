// Package delayline is the testbed's user-space delay line: it reads every IPv4 packet
// the router namespace routes into a TUN device, holds it for the one-way delay of its
// path (per internet-side address, plus a per-vantage extra), drops it with the path's
// loss probability (seeded RNG) and writes it back into the TUN device, from where the
// kernel forwards it on. The kernel of the testbed machines has no netem, hence this.
//
// Timing: Go timers wake up to ~1 ms late on these machines, which would eat the 0.5 ms
// accuracy budget. The release loop therefore runs on its own locked OS thread with a
// 1 ns timer slack and blocks on a timerfd armed (CLOCK_MONOTONIC, absolute) for the
// earliest deadline; the reader re-arms it when a packet with an earlier deadline comes
// in. Packets wait in min-heaps of pointer-free entries (deadline, sequence, buffer
// slot), one per release shard (flows are hashed onto shards, so each keeps its order;
// several release threads spread the kernel's forwarding work done inside each TUN write
// over several CPUs); buffers live in a slab allocated in chunks and recycled, so the
// steady state allocates nothing. Packets of one flow (source, destination, protocol) never overtake
// each other: with jitter a packet's deadline is at least its predecessor's.
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
)

// Addressing the delay line relies on (see docs/testbed.md).
var (
	// InternetPrefix is the simulated internet (AnyIP in the internet namespace).
	InternetPrefix = netip.MustParsePrefix("198.19.0.0/16")
	// VantagePrefix holds the vantage links: vantage i is 198.18.i.2/24.
	VantagePrefix = netip.MustParsePrefix("198.18.0.0/16")
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
)

// Device is what the line reads packets from and writes them back to: the TUN device in
// production, an in-memory pipe in tests.
type Device interface {
	io.ReadWriter
	Close() error
}

// Config configures a Line.
type Config struct {
	Paths Paths // required
	// Vantage[i] is an extra one-way delay for packets to or from 198.18.i.0/24.
	Vantage map[int]time.Duration
	// Seed seeds the loss and jitter RNG (same seed, same packet sequence: same drops).
	Seed        uint64
	MaxInFlight int // 0: DefaultMaxInFlight
	// Shards is the number of release queues and threads (0: DefaultShards). Flows are
	// hashed onto shards, so each flow keeps its order.
	Shards int
	// Lead releases packets this much before their deadline to cancel the wake-up
	// latency of the release thread (typically tens of µs); 0 releases at or after it.
	Lead time.Duration
	// RealTime runs the reader and release threads under SCHED_FIFO (needs root or
	// CAP_SYS_NICE; silently not applied otherwise): on a loaded machine a normal thread
	// waits for a CPU for milliseconds, which no timer precision can make up for.
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
	Dropped   uint64 `json:"dropped"`   // not IPv4, truncated, or over MaxInFlight
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
}

type entry struct {
	due  int64 // monotonic ns
	seq  uint64
	slot int32
	n    int32
}

type flowKey struct {
	src, dst [4]byte
	proto    uint8
}

// shard is one release queue with its own timerfd and thread. A flow (source,
// destination, protocol) always maps to the same shard, so its packets stay in order;
// several shards let the kernel's forwarding work (done inside each TUN write) use
// several CPUs.
type shard struct {
	mu    sync.Mutex
	heap  []entry
	armed int64 // deadline the timerfd is armed for, 0 = disarmed
	tfd   int
}

// Line is a delay line. Create it with New, run it with Run.
type Line struct {
	cfg    Config
	paths  atomic.Pointer[pathsBox]
	dev    Device
	clock  clock
	shards []*shard

	slabMu sync.Mutex // slab, free, nslots
	slab   [][]byte   // chunks of slabChunk*SlotSize
	free   []int32
	nslots int

	// Reader-only state (no lock: only the reader thread touches it).
	seq   uint64
	rng   *rand.Rand
	flows map[flowKey]int64

	stopped atomic.Bool

	// Counters are atomics: a reader of Stats on an ordinary thread must never hold a
	// lock the real-time threads wait for (priority inversion on a loaded machine).
	received, forwarded, lost, dropped, overflow, lateOver, writeErrs atomic.Uint64
	inFlight, maxHeld                                                 atomic.Int64
	lateSum, lateCount, lateMax                                       atomic.Int64
}

type pathsBox struct {
	p       Paths
	vantage map[int]time.Duration
}

// DefaultShards is the number of release threads when Config.Shards is 0.
const DefaultShards = 2

// New prepares a line on dev.
func New(dev Device, cfg Config) (*Line, error) {
	if cfg.Paths == nil {
		return nil, errors.New("delayline: Config.Paths is required")
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Shards <= 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	l := &Line{
		cfg:   cfg,
		dev:   dev,
		clock: newClock(),
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		flows: map[flowKey]int64{},
	}
	for i := 0; i < cfg.Shards; i++ {
		tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
		if err != nil {
			for _, sh := range l.shards {
				unix.Close(sh.tfd)
			}
			return nil, fmt.Errorf("delayline: timerfd_create: %w", err)
		}
		l.shards = append(l.shards, &shard{tfd: tfd})
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
	s := Stats{
		Received: l.received.Load(), Forwarded: l.forwarded.Load(), Lost: l.lost.Load(),
		Dropped: l.dropped.Load(), Overflow: l.overflow.Load(), InFlight: int(l.inFlight.Load()),
		MaxHeld: int(l.maxHeld.Load()), LateMaxNS: l.lateMax.Load(), LateOver: l.lateOver.Load(),
		WriteErrs: l.writeErrs.Load(),
	}
	s.LateSumNS, s.Releases = l.lateSum.Load(), l.lateCount.Load()
	if s.Releases > 0 {
		s.LateMeanNS = s.LateSumNS / s.Releases
	}
	return s
}

// Run moves packets until ctx is done or the device fails. It closes the device.
func (l *Line) Run(ctx context.Context) error {
	var rel sync.WaitGroup
	for _, sh := range l.shards {
		rel.Add(1)
		go func() {
			defer rel.Done()
			l.releaseLoop(sh)
		}()
	}
	readErr := make(chan error, 1)
	go func() { readErr <- l.readLoop() }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-readErr:
	}
	l.stopped.Store(true)
	for _, sh := range l.shards {
		sh.mu.Lock()
		sh.armLocked(1, l.cfg.Log) // wake the release loop
		sh.mu.Unlock()
	}
	rel.Wait()
	cerr := l.dev.Close()
	for _, sh := range l.shards {
		unix.Close(sh.tfd)
	}
	if err == nil && ctx.Err() == nil {
		err = cerr
	}
	return err
}

// readLoop reads packets, classifies them and queues them with their deadline.
func (l *Line) readLoop() error {
	runtime.LockOSThread() // never unlocked: the thread may be SCHED_FIFO; it exits with us
	l.realtime("reader")
	slot, ok := l.alloc()
	for {
		if !ok {
			// Over MaxInFlight: read into a scratch buffer and drop.
			var scratch [SlotSize]byte
			if _, err := l.dev.Read(scratch[:]); err != nil {
				return l.readErr(err)
			}
			l.received.Add(1)
			l.dropped.Add(1)
			l.overflow.Add(1)
			slot, ok = l.alloc()
			continue
		}
		buf := l.buf(slot)
		n, err := l.dev.Read(buf)
		if err != nil {
			return l.readErr(err)
		}
		now := l.clock.now()
		h, perr := ParseIPv4(buf[:n])
		l.received.Add(1)
		if perr != nil || n >= SlotSize {
			l.dropped.Add(1)
			continue // reuse the slot
		}
		due, lost := l.decideLocked(h, now)
		if lost {
			l.lost.Add(1)
			continue
		}
		sh := l.shards[shardOf(h, len(l.shards))]
		sh.mu.Lock()
		sh.push(entry{due: due, seq: l.seq, slot: slot, n: int32(n)})
		if sh.armed == 0 || due < sh.armed {
			sh.armLocked(due, l.cfg.Log)
		}
		sh.mu.Unlock()
		l.seq++
		if held := l.inFlight.Add(1); held > l.maxHeld.Load() {
			l.maxHeld.Store(held)
		}
		slot, ok = l.alloc()
	}
}

// shardOf maps a flow (both directions of it) to a shard.
func shardOf(h Header, n int) int {
	if n == 1 {
		return 0
	}
	a, b := h.Src.As4(), h.Dst.As4()
	x := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	y := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v := (x ^ y ^ uint32(h.Proto)) * 0x9e3779b1
	return int(v>>16) % n
}

func (l *Line) readErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, ErrClosed) {
		return nil
	}
	return fmt.Errorf("delayline: read: %w", err)
}

// decideLocked returns the release deadline of a packet, or lost. Only the reader
// thread calls it (it owns rng and flows).
func (l *Line) decideLocked(h Header, now int64) (due int64, lost bool) {
	pb := l.paths.Load()
	inet, vant := h.Dst, h.Src
	if !InternetPrefix.Contains(inet) {
		inet, vant = h.Src, h.Dst
	}
	var prof Profile
	if InternetPrefix.Contains(inet) {
		prof = pb.p.Lookup(inet)
	}
	delay := prof.OneWay
	if VantagePrefix.Contains(vant) {
		delay += pb.vantage[int(vant.As4()[2])]
	}
	if prof.Loss > 0 && l.rng.Float64() < prof.Loss {
		return 0, true
	}
	if prof.Jitter > 0 {
		delay += time.Duration((2*l.rng.Float64() - 1) * float64(prof.Jitter))
		if delay < 0 {
			delay = 0
		}
	}
	due = now + int64(delay) - int64(l.cfg.Lead)
	if prof.Jitter > 0 || len(l.flows) > 0 {
		// Per-flow FIFO: never release before the previous packet of the flow.
		k := flowKey{src: h.Src.As4(), dst: h.Dst.As4(), proto: h.Proto}
		if last, ok := l.flows[k]; ok && due <= last {
			due = last + 1
		}
		if prof.Jitter > 0 {
			l.flows[k] = due
		}
		if len(l.flows) > flowSweepAt {
			for k, last := range l.flows {
				if last < now {
					delete(l.flows, k)
				}
			}
		}
	}
	return due, false
}

// releaseLoop waits for one shard's deadlines on a locked thread and writes due
// packets back.
func (l *Line) releaseLoop(sh *shard) {
	runtime.LockOSThread() // never unlocked (see readLoop)
	l.realtime("release")
	// 1 ns timer slack: the default 50 µs slack would delay every wake-up.
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	var tick [8]byte
	batch := make([]entry, 0, 256)
	slots := make([]int32, 0, 256)
	for {
		if _, err := unix.Read(sh.tfd, tick[:]); err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			l.cfg.Log.Error("delayline: timerfd read", "err", err)
			return
		}
		if l.stopped.Load() {
			return
		}
		sh.mu.Lock()
		now := l.clock.now()
		batch = batch[:0]
		for len(sh.heap) > 0 && sh.heap[0].due <= now {
			batch = append(batch, sh.pop())
		}
		if len(sh.heap) > 0 {
			sh.armLocked(sh.heap[0].due, l.cfg.Log)
		} else {
			sh.armLocked(0, l.cfg.Log)
		}
		sh.mu.Unlock()
		var lateSum, lateMax int64
		var over, werr uint64
		slots = slots[:0]
		for _, e := range batch {
			if _, err := l.dev.Write(l.buf(e.slot)[:e.n]); err != nil {
				werr++
			}
			late := l.clock.now() - (e.due + int64(l.cfg.Lead))
			lateSum += late
			lateMax = max(lateMax, late)
			if late > int64(100*time.Microsecond) {
				over++
			}
			slots = append(slots, e.slot)
		}
		l.slabMu.Lock()
		l.free = append(l.free, slots...)
		l.slabMu.Unlock()
		l.inFlight.Add(-int64(len(batch)))
		l.forwarded.Add(uint64(len(batch)) - werr)
		l.writeErrs.Add(werr)
		l.lateOver.Add(over)
		l.lateSum.Add(lateSum)
		l.lateCount.Add(int64(len(batch)))
		if lateMax > l.lateMax.Load() {
			l.lateMax.Store(lateMax)
		}
	}
}

// armLocked arms the shard's timerfd for an absolute monotonic deadline (0 disarms).
func (sh *shard) armLocked(due int64, log *slog.Logger) {
	sh.armed = due
	var its unix.ItimerSpec
	if due > 0 {
		its.Value = unix.NsecToTimespec(due)
	}
	if err := unix.TimerfdSettime(sh.tfd, unix.TFD_TIMER_ABSTIME, &its, nil); err != nil {
		log.Error("delayline: timerfd_settime", "err", err)
	}
}

func (l *Line) buf(slot int32) []byte {
	c, i := int(slot)/slabChunk, int(slot)%slabChunk
	return l.slab[c][i*SlotSize : (i+1)*SlotSize : (i+1)*SlotSize]
}

// alloc returns a free buffer slot, or false over MaxInFlight.
func (l *Line) alloc() (int32, bool) {
	l.slabMu.Lock()
	defer l.slabMu.Unlock()
	if n := len(l.free); n > 0 {
		s := l.free[n-1]
		l.free = l.free[:n-1]
		return s, true
	}
	if l.nslots >= l.cfg.MaxInFlight+1 {
		return 0, false
	}
	l.slab = append(l.slab, make([]byte, slabChunk*SlotSize))
	base := int32(l.nslots)
	l.nslots += slabChunk
	for i := int32(slabChunk - 1); i > 0; i-- {
		l.free = append(l.free, base+i)
	}
	return base, true
}

// The heap is ordered by (due, seq): equal deadlines leave in arrival order.
func less(a, b entry) bool { return a.due < b.due || (a.due == b.due && a.seq < b.seq) }

func (sh *shard) push(e entry) {
	h := append(sh.heap, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	sh.heap = h
}

func (sh *shard) pop() entry {
	h := sh.heap
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
	sh.heap = h
	return top
}

// clock reads CLOCK_MONOTONIC (the timerfd's clock) through Go's vDSO-backed monotonic
// time: one clock_gettime at start, then time.Since.
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
