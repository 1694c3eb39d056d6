package optout

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"time"
)

// V6SourceBits is the IPv6 prefix length the page's rate limits count as one source. A /56
// is what one customer of most ISPs gets (RIPE-690 recommends a /48 or /56 per site), so
// one household or office is one source however many /64s it routes; a flood from a /48
// is 256 sources, not 65,536.
const V6SourceBits = 56

// DefaultSources is how many sources each limiter remembers.
const DefaultSources = 100_000

// source is what a limiter counts: an IPv4 address, or an IPv6 /V6SourceBits prefix
// (its first 64 bits, masked).
type source struct {
	bits uint64
	v6   bool
}

// sourceOf returns the source of a request's RemoteAddr. An address that does not parse
// (not expected from net/http) falls into one shared source.
func sourceOf(remote string) source {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return source{}
	}
	a := ap.Addr().Unmap()
	if a.Is4() {
		b := a.As4()
		return source{bits: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return source{bits: binary.BigEndian.Uint64(b[:8]) &^ (1<<(64-V6SourceBits) - 1), v6: true}
}

// String returns the source as an address or prefix, for logs.
func (s source) String() string {
	if !s.v6 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(s.bits))
		return netip.AddrFrom4(b).String()
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], s.bits)
	return netip.PrefixFrom(netip.AddrFrom16(b), V6SourceBits).String()
}

// sourceLimiter is a token bucket per source over a table of fixed size. When the table
// is full, a source not in it takes the slot of the source seen least recently, with a
// full bucket: a flood from more sources than the table holds costs the flooders' own
// buckets and never locks a newcomer out; the price is that a source evicted in between
// starts again with a full burst. Memory stays at the table's size; every call is O(1).
type sourceLimiter struct {
	mu         sync.Mutex
	perSecond  float64
	burst      float64
	capacity   int
	index      map[source]int32
	buckets    []bucket // slots, linked from most recently seen (head) to least (tail)
	head, tail int32
	evictions  uint64
}

type bucket struct {
	key        source
	tokens     float64
	last       int64 // when tokens were last refilled, Unix nanoseconds
	prev, next int32 // neighbours in recency order; -1 at the ends
}

func newSourceLimiter(perSecond float64, burst, capacity int) *sourceLimiter {
	if capacity < 1 {
		capacity = 1
	}
	return &sourceLimiter{perSecond: perSecond, burst: float64(burst), capacity: capacity,
		index: map[source]int32{}, head: -1, tail: -1}
}

// allow takes one token from src's bucket at now and reports whether there was one.
func (l *sourceLimiter) allow(src source, now time.Time) bool {
	t := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	i, ok := l.index[src]
	if ok {
		b := &l.buckets[i]
		if dt := t - b.last; dt > 0 {
			b.tokens = min(l.burst, b.tokens+float64(dt)/1e9*l.perSecond)
			b.last = t
		}
		l.unlink(i)
	} else {
		if len(l.buckets) < l.capacity {
			i = int32(len(l.buckets))
			l.buckets = append(l.buckets, bucket{})
		} else {
			i = l.tail
			l.unlink(i)
			delete(l.index, l.buckets[i].key)
			l.evictions++
		}
		l.buckets[i] = bucket{key: src, tokens: l.burst, last: t}
		l.index[src] = i
	}
	l.pushFront(i)
	b := &l.buckets[i]
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

func (l *sourceLimiter) unlink(i int32) {
	b := &l.buckets[i]
	if b.prev >= 0 {
		l.buckets[b.prev].next = b.next
	} else {
		l.head = b.next
	}
	if b.next >= 0 {
		l.buckets[b.next].prev = b.prev
	} else {
		l.tail = b.prev
	}
}

func (l *sourceLimiter) pushFront(i int32) {
	b := &l.buckets[i]
	b.prev, b.next = -1, l.head
	if l.head >= 0 {
		l.buckets[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
}

// stats returns how many sources the table holds and how many it has evicted.
func (l *sourceLimiter) stats() (sources int, evictions uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets), l.evictions
}
