package optout

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

func v4(i uint32) source { return source{bits: uint64(i)} }

func TestLimiterFullTableServesNewcomers(t *testing.T) {
	const capacity = 8
	l := newSourceLimiter(1.0/60, 2, capacity)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Ten times more distinct sources than the table holds, each once: every one is served.
	for i := uint32(0); i < 10*capacity; i++ {
		if !l.allow(v4(i), now) {
			t.Fatalf("source %d of %d refused with the table full", i, 10*capacity)
		}
	}
	if n, ev := l.stats(); n != capacity || ev != 9*capacity {
		t.Errorf("table holds %d sources after %d evictions, want %d and %d", n, ev, capacity, 9*capacity)
	}
	newcomer := v4(1 << 30)
	if !l.allow(newcomer, now) {
		t.Fatal("a newcomer was refused after the flood")
	}
}

func TestLimiterEvictsLeastRecentlySeen(t *testing.T) {
	l := newSourceLimiter(0, 2, 3)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// a spends its burst; b and c arrive; a is seen again (refused, but recent); d must
	// then evict b, the least recently seen, and a keeps its empty bucket.
	a, b, c, d := v4(1), v4(2), v4(3), v4(4)
	for range 2 {
		l.allow(a, now)
	}
	l.allow(b, now)
	l.allow(c, now)
	if l.allow(a, now) {
		t.Fatal("a allowed beyond its burst")
	}
	l.allow(d, now)
	if _, ok := l.index[b]; ok {
		t.Error("b (least recently seen) was not evicted")
	}
	for _, s := range []source{a, c, d} {
		if _, ok := l.index[s]; !ok {
			t.Errorf("%v evicted", s)
		}
	}
	if l.allow(a, now) {
		t.Error("a got a fresh bucket although it was seen recently")
	}
}

func TestLimiterTokenBucket(t *testing.T) {
	l := newSourceLimiter(2, 3, 10) // 2 per second, burst 3
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := v4(7)
	got := ""
	for _, dt := range []time.Duration{0, 0, 0, 0, 400 * time.Millisecond, 600 * time.Millisecond, 600 * time.Millisecond, 10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second} {
		if l.allow(s, t0.Add(dt)) {
			got += "y"
		} else {
			got += "n"
		}
	}
	// 3 of burst, refused, 0.8 token at 400 ms, 1.2 at 600 ms, spent, then 3 again (the
	// bucket holds no more than the burst) and refused.
	if got != "yyynnynyyyn" {
		t.Errorf("allowed %s, want yyynnynyyyn", got)
	}
	// A clock that steps back adds no tokens.
	if l.allow(s, t0) {
		t.Error("allowed after the clock stepped back")
	}
}

func TestSourceOfIPv6Slash56(t *testing.T) {
	same := []string{"[2001:db8:0:ff::1]:1", "[2001:db8:0:1::2]:2", "[2001:db8::]:3", "[2001:db8:0:ab:1:2:3:4]:4"}
	want := sourceOf(same[0])
	for _, r := range same[1:] {
		if got := sourceOf(r); got != want {
			t.Errorf("sourceOf(%s) = %v, want %v (same /56)", r, got, want)
		}
	}
	if want.String() != "2001:db8::/56" {
		t.Errorf("source prints as %s", want)
	}
	for _, r := range []string{"[2001:db8:0:100::1]:1", "[2001:db8:1::1]:1", "[2001:db9::]:1", "0.0.0.0:1", "[::ffff:0.0.0.0]:1"} {
		if sourceOf(r) == want {
			t.Errorf("sourceOf(%s) = %v: a different /56 (or IPv4) shares the source", r, want)
		}
	}
	// IPv4 and IPv4-mapped IPv6 are the same source; two IPv4 addresses are not.
	if sourceOf("192.0.2.1:80") != sourceOf("[::ffff:192.0.2.1]:80") || sourceOf("192.0.2.1:80") == sourceOf("192.0.2.2:80") {
		t.Error("IPv4 sources wrong")
	}
	if s := sourceOf("192.0.2.1:80").String(); s != "192.0.2.1" {
		t.Errorf("IPv4 source prints as %s", s)
	}
}

func TestLimiterSlash48FloodIs256Sources(t *testing.T) {
	l := newSourceLimiter(1, 1, 100_000)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := netip.MustParseAddr("2001:db8:77::").As16()
	for i := range 1 << 16 { // every /64 of 2001:db8:77::/48
		a := base
		a[6], a[7] = byte(i>>8), byte(i)
		l.allow(sourceOf(netip.AddrPortFrom(netip.AddrFrom16(a), 443).String()), now)
	}
	if n, _ := l.stats(); n != 256 {
		t.Errorf("a /48 flood fills %d slots, want 256", n)
	}
}

func FuzzSourceOf(f *testing.F) {
	f.Add("192.0.2.1:80")
	f.Add("[2001:db8::1%eth0]:443")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, remote string) {
		s := sourceOf(remote)
		if s.v6 && s.bits&(1<<(64-V6SourceBits)-1) != 0 {
			t.Fatalf("unmasked bits in %x", s.bits)
		}
		if !s.v6 && s.bits>>32 != 0 {
			t.Fatalf("IPv4 source with high bits %x", s.bits)
		}
		_ = s.String()
	})
}

// BenchmarkSourceLimiter: allow() per second on a full table (every call a newcomer that
// evicts, or a hit on a remembered source) and the memory a full table of DefaultSources
// takes.
func BenchmarkSourceLimiter(b *testing.B) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	full := func() *sourceLimiter {
		l := newSourceLimiter(10, 20, DefaultSources)
		for i := range uint32(DefaultSources) {
			l.allow(v4(i), now)
		}
		return l
	}
	b.Run("memory", func(b *testing.B) {
		var held uint64
		for range b.N {
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			l := full()
			runtime.GC()
			runtime.ReadMemStats(&m1)
			held = m1.HeapAlloc - m0.HeapAlloc
			runtime.KeepAlive(l)
		}
		b.ReportMetric(float64(held)/(1<<20), "MiB/table")
		b.ReportMetric(float64(held)/DefaultSources, "B/source")
		b.Logf("a full table of %d sources holds %.1f MiB (%.0f B per source)", DefaultSources, float64(held)/(1<<20), float64(held)/DefaultSources)
	})
	for _, c := range []struct {
		name   string
		source func(i int) source
	}{
		{"newcomers", func(i int) source { return v4(uint32(DefaultSources + i)) }},
		{"remembered", func(i int) source { return v4(uint32(i % DefaultSources)) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			l := full()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				l.allow(c.source(i), now)
			}
			ops := float64(b.N) / time.Since(start).Seconds()
			b.ReportMetric(ops, "ops/s")
			if n, _ := l.stats(); n != DefaultSources {
				b.Fatalf("table holds %d", n)
			}
		})
	}
	b.Run("parallel-random", func(b *testing.B) {
		l := full()
		b.ResetTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(rand.Uint64(), 1))
			for pb.Next() {
				l.allow(v4(r.Uint32N(2*DefaultSources)), now)
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	})
}
