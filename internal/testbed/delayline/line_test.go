package delayline

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// chanDev is an in-memory single-queue Device: packets sent on in are read by the line;
// what the line writes arrives on out with its write time.
type chanDev struct {
	in      chan []byte
	out     chan written
	done    chan struct{}
	once    sync.Once
	pending []byte // taken off in by Wait, returned by the next Read
}

type written struct {
	b  []byte
	at time.Time
}

func newChanDev() *chanDev {
	return &chanDev{in: make(chan []byte, 1024), out: make(chan written, 100000), done: make(chan struct{})}
}

func (d *chanDev) Queues() []Queue { return []Queue{d} }

func (d *chanDev) Read(b []byte) (int, error) {
	if d.pending != nil {
		n := copy(b, d.pending)
		d.pending = nil
		return n, nil
	}
	select {
	case p := <-d.in:
		return copy(b, p), nil
	case <-d.done:
		return 0, ErrClosed
	default:
		return 0, ErrAgain
	}
}

func (d *chanDev) Write(b []byte) (int, error) {
	d.out <- written{append([]byte(nil), b...), time.Now()}
	return len(b), nil
}

func (d *chanDev) Wait(timeout time.Duration, watch bool) (bool, error) {
	var tc <-chan time.Time
	if timeout >= 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	in := d.in
	if !watch || d.pending != nil {
		in = nil
	}
	select {
	case p := <-in:
		d.pending = p
		return true, nil
	case <-tc:
		return false, nil
	case <-d.done:
		return false, ErrClosed
	}
}

func (d *chanDev) Interrupt()   { d.once.Do(func() { close(d.done) }) }
func (d *chanDev) Close() error { d.Interrupt(); return nil }

// pkt builds an IPv4/UDP packet whose payload carries a sequence number.
func pkt(src, dst string, seq uint32) []byte {
	b := make([]byte, 32)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[9] = 17
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint32(b[28:], seq)
	return b
}

func seqOf(b []byte) uint32 {
	if b[0]>>4 == 6 {
		return binary.BigEndian.Uint32(b[48:])
	}
	return binary.BigEndian.Uint32(b[28:])
}

// pkt6 builds an IPv6/UDP packet whose payload carries a sequence number.
func pkt6(src, dst string, seq uint32) []byte {
	b := make([]byte, 52)
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	b[6], b[7] = 17, 64
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	binary.BigEndian.PutUint32(b[48:], seq)
	return b
}

// packet builds an IPv4 or IPv6 packet, by the family of its addresses.
func packet(src, dst string, seq uint32) []byte {
	if netip.MustParseAddr(src).Is6() {
		return pkt6(src, dst, seq)
	}
	return pkt(src, dst, seq)
}

func runLine(t *testing.T, cfg Config) (*chanDev, *Line, func()) {
	t.Helper()
	d := newChanDev()
	l, err := New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	return d, l, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// Every packet is held at least its path's one-way delay (plus the vantage extra), in
// both directions, looked up on the internet-side (or database-side) address, in both
// address families.
func TestDelayBothDirections(t *testing.T) {
	tbl := NewTable(Profile{OneWay: 3 * time.Millisecond})
	tbl.Set(netip.MustParsePrefix("198.19.5.0/24"), Profile{OneWay: 10 * time.Millisecond})
	tbl.Set(netip.MustParsePrefix("2001:2:0:8005::/64"), Profile{OneWay: 10 * time.Millisecond})
	tbl.Set(netip.MustParsePrefix("198.18.254.2/32"), Profile{OneWay: 20 * time.Millisecond}) // the central database
	d, _, stop := runLine(t, Config{Paths: tbl, Vantage: map[int]time.Duration{1: 4 * time.Millisecond}})
	defer stop()
	cases := []struct {
		src, dst string
		min      time.Duration
	}{
		{"198.18.0.2", "198.19.5.9", 10 * time.Millisecond},
		{"198.19.5.9", "198.18.0.2", 10 * time.Millisecond},
		{"198.18.0.2", "198.19.6.1", 3 * time.Millisecond},
		{"198.18.1.2", "198.19.5.9", 14 * time.Millisecond},
		{"198.19.6.1", "198.18.1.2", 7 * time.Millisecond},
		{"2001:2::2", "2001:2:0:8005::9", 10 * time.Millisecond},
		{"2001:2:0:8005::9", "2001:2::2", 10 * time.Millisecond},
		{"2001:2::2", "2001:2:0:8006::1", 3 * time.Millisecond},
		{"2001:2:0:1::2", "2001:2:0:8005::9", 14 * time.Millisecond},
		{"2001:2:0:8006::1", "2001:2:0:1::2", 7 * time.Millisecond},
		// The central database's link is the far side of its paths, like the internet.
		{"198.18.0.2", "198.18.254.2", 20 * time.Millisecond},
		{"198.18.254.2", "198.18.0.2", 20 * time.Millisecond},
		{"198.18.254.2", "198.18.1.2", 24 * time.Millisecond},
	}
	for i, c := range cases {
		t0 := time.Now()
		d.in <- packet(c.src, c.dst, uint32(i))
		w := <-d.out
		if seqOf(w.b) != uint32(i) {
			t.Fatalf("case %d: got packet %d", i, seqOf(w.b))
		}
		if held := w.at.Sub(t0); held < c.min {
			t.Errorf("%s -> %s held %v, want at least %v", c.src, c.dst, held, c.min)
		}
	}
}

// With jitter, packets of one flow still leave in order; loss follows the seed.
func TestJitterKeepsFlowOrderAndSeededLoss(t *testing.T) {
	const n = 2000
	run := func() (got []uint32, st Stats) {
		tbl := NewTable(Profile{OneWay: time.Millisecond, Jitter: time.Millisecond, Loss: 0.1})
		d, l, stop := runLine(t, Config{Paths: tbl, Seed: 42})
		for i := 0; i < n; i++ {
			d.in <- pkt("198.18.0.2", "198.19.0.1", uint32(i))
		}
		// Wait for the condition "every packet accounted for" (the out channel is
		// large enough that writes never block), then drain.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for st = l.Stats(); st.Forwarded+st.Lost < n; st = l.Stats() {
			<-tick.C
		}
		for len(d.out) > 0 {
			got = append(got, seqOf((<-d.out).b))
		}
		stop()
		return got, l.Stats()
	}
	a, sa := run()
	for i := 1; i < len(a); i++ {
		if a[i] <= a[i-1] {
			t.Fatalf("flow reordered: %d after %d", a[i], a[i-1])
		}
	}
	if sa.Lost < n/20 || sa.Lost > n/5 {
		t.Errorf("lost %d of %d at loss 0.1", sa.Lost, n)
	}
	b, _ := run()
	if len(a) != len(b) {
		t.Fatalf("same seed, different losses: %d vs %d delivered", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different packets delivered at %d", i)
		}
	}
}

// Different paths: a short path overtakes a long one (no head-of-line blocking).
func TestShortPathOvertakes(t *testing.T) {
	tbl := NewTable(Profile{})
	tbl.SetAddr(netip.MustParseAddr("198.19.0.1"), Profile{OneWay: 200 * time.Millisecond})
	tbl.SetAddr(netip.MustParseAddr("198.19.0.2"), Profile{OneWay: 1 * time.Millisecond})
	d, _, stop := runLine(t, Config{Paths: tbl})
	defer stop()
	d.in <- pkt("198.18.0.2", "198.19.0.1", 1)
	d.in <- pkt("198.18.0.2", "198.19.0.2", 2)
	if first := seqOf((<-d.out).b); first != 2 {
		t.Errorf("first out %d, want the 1 ms packet", first)
	}
	if second := seqOf((<-d.out).b); second != 1 {
		t.Errorf("second out %d", second)
	}
}

func TestDropsGarbage(t *testing.T) {
	d, l, stop := runLine(t, Config{Paths: NewTable(Profile{})})
	d.in <- []byte{0x60, 0, 0, 0}          // IPv6-ish, short
	d.in <- bytes.Repeat([]byte{0x45}, 40) // total length 0x4545 > 40
	d.in <- bytes.Repeat([]byte{0x60}, 48) // IPv6, payload length 0x6060 > 8
	d.in <- []byte{0x20, 0, 0, 0}          // version 2
	d.in <- pkt("198.18.0.2", "198.19.0.1", 7)
	d.in <- pkt6("2001:2::2", "2001:2:0:8000::1", 8)
	if got := seqOf((<-d.out).b); got != 7 {
		t.Errorf("got %d", got)
	}
	if got := seqOf((<-d.out).b); got != 8 {
		t.Errorf("got %d", got)
	}
	stop()
	if st := l.Stats(); st.Dropped != 4 || st.Forwarded != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestTableRoundTrip(t *testing.T) {
	src := `# comment
default rtt=20ms jitter=1ms loss=0.01
vantage 1 rtt=10ms
198.19.5.0/24 rtt=5ms
198.19.5.128/25 rtt=80ms
198.19.5.200 rtt=300ms loss=0.5
2001:2:0:8005::/64 rtt=40ms
2001:2:0:8005::5 rtt=150ms
`
	tbl, err := ParseTable(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	for a, want := range map[string]time.Duration{"198.19.5.1": 5, "198.19.5.129": 80, "198.19.5.200": 300, "198.19.9.9": 20,
		"2001:2:0:8005::1": 40, "2001:2:0:8005::5": 150, "2001:2:0:8009::1": 20} {
		if got := tbl.Lookup(netip.MustParseAddr(a)).RTT(); got != want*time.Millisecond {
			t.Errorf("%s: rtt %v, want %v ms", a, got, want)
		}
	}
	if tbl.Vantage[1] != 5*time.Millisecond {
		t.Errorf("vantage 1 one-way %v", tbl.Vantage[1])
	}
	var buf bytes.Buffer
	if _, err := tbl.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	again, err := ParseTable(&buf)
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if again.Len() != tbl.Len() || again.Default != tbl.Default || again.Vantage[1] != tbl.Vantage[1] {
		t.Errorf("round trip changed the table:\n%s", buf.String())
	}
	for _, bad := range []string{"default rtt=-1ms", "x rtt=1ms", "198.19.0.0/33 rtt=1ms", "default loss=2",
		"default rtt", "vantage 999 rtt=1ms", "vantage 1 loss=0.1", "default speed=3", "2001:2::/129 rtt=1ms", "::ffff:198.19.0.1 rtt=1ms", "fe80::1%eth0 rtt=1ms"} {
		if _, err := ParseTable(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseTable(%q) accepted", bad)
		}
	}
}

func FuzzParseIPv4(f *testing.F) {
	f.Add(pkt("198.18.0.2", "198.19.0.1", 1))
	f.Add([]byte{0x4f, 0, 0, 60})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseIPv4(b)
		if err == nil && (!h.Src.Is4() || !h.Dst.Is4()) {
			t.Fatalf("accepted with bad addresses: %+v", h)
		}
	})
}

// FuzzParsePacket: any bytes give the addresses of the family the first nibble names,
// or an error, never a panic.
func FuzzParsePacket(f *testing.F) {
	f.Add(pkt("198.18.0.2", "198.19.0.1", 1))
	f.Add(pkt6("2001:2::2", "2001:2:0:8000::1", 1))
	f.Add([]byte{0x60, 0, 0, 0, 0, 8, 0, 64})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParsePacket(b)
		if err != nil {
			return
		}
		if v4 := b[0]>>4 == 4; h.Src.Is4() != v4 || h.Dst.Is4() != v4 {
			t.Fatalf("version %d packet gave %+v", b[0]>>4, h)
		}
	})
}

func FuzzParseTable(f *testing.F) {
	f.Add("default rtt=20ms jitter=1ms loss=0.01\nvantage 1 rtt=10ms\n198.19.5.0/24 rtt=5ms\n198.19.5.200 loss=1\n")
	f.Fuzz(func(t *testing.T, s string) {
		tbl, err := ParseTable(strings.NewReader(s))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if _, err := tbl.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		again, err := ParseTable(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("written table does not parse: %v\n%s", err, buf.String())
		}
		if again.Len() != tbl.Len() {
			t.Fatalf("round trip: %d entries, want %d", again.Len(), tbl.Len())
		}
	})
}

// multiDev is a Device of several in-memory queues (a multi-queue TUN in miniature).
type multiDev struct{ qs []*chanDev }

func (m multiDev) Queues() []Queue {
	var out []Queue
	for _, q := range m.qs {
		out = append(out, q)
	}
	return out
}
func (m multiDev) Interrupt() {
	for _, q := range m.qs {
		q.Interrupt()
	}
}
func (m multiDev) Close() error { m.Interrupt(); return nil }

// One worker per queue: every queue's packets are delayed and forwarded on that queue,
// in order, and Stats add the workers' counters up.
func TestQueuesWorkIndependently(t *testing.T) {
	const perQueue = 200
	dev := multiDev{qs: []*chanDev{newChanDev(), newChanDev(), newChanDev()}}
	l, err := New(dev, Config{Paths: NewTable(Profile{OneWay: 2 * time.Millisecond})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for i, q := range dev.qs {
		for j := 0; j < perQueue; j++ {
			q.in <- pkt("198.18.0.2", fmt.Sprintf("198.19.0.%d", i+1), uint32(j))
		}
	}
	for i, q := range dev.qs {
		for j := 0; j < perQueue; j++ {
			if got := seqOf((<-q.out).b); got != uint32(j) {
				t.Fatalf("queue %d: packet %d out as number %d", i, got, j)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if n := uint64(len(dev.qs) * perQueue); st.Received != n || st.Forwarded != n || st.Queues != len(dev.qs) || st.InFlight != 0 {
		t.Errorf("stats %+v, want %d received and forwarded on %d queues", st, n, len(dev.qs))
	}
}

// Over MaxInFlight held packets, further packets are read and dropped (counted as
// overflow), never queued.
func TestMaxInFlightOverflow(t *testing.T) {
	const limit, sent = 10, 30
	d, l, stop := runLine(t, Config{Paths: NewTable(Profile{OneWay: time.Hour}), MaxInFlight: limit})
	for i := 0; i < sent; i++ {
		d.in <- pkt("198.18.0.2", "198.19.0.1", uint32(i))
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for l.Stats().Received < sent {
		<-tick.C
	}
	stop()
	st := l.Stats()
	if st.InFlight != limit || st.MaxHeld != limit || st.Overflow != sent-limit || st.Dropped != sent-limit || st.Forwarded != 0 {
		t.Errorf("stats %+v, want %d held and %d overflowed", st, limit, sent-limit)
	}
}
