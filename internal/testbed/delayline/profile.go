package delayline

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Profile is the emulated path between a vantage point and one internet address, per
// direction: every packet is held OneWay plus a jitter drawn uniformly from
// [-Jitter, +Jitter] (never below zero; the population file's definition) and dropped with
// probability Loss. Both directions of a flow look up the same Profile (keyed by the internet-side
// address), so a round trip costs 2×OneWay.
type Profile struct {
	OneWay time.Duration
	Jitter time.Duration
	Loss   float64
}

// RTT is the round-trip time the profile emulates (without jitter).
func (p Profile) RTT() time.Duration { return 2 * p.OneWay }

// Paths answers the path profile of an internet-side address. The population file
// (internal/testbed/population) is turned into a Table by the orchestration; tests may
// implement Paths directly.
type Paths interface {
	Lookup(inet netip.Addr) Profile
}

// Table is a Paths built from exact addresses, prefixes (longest match wins) and a
// default, plus a per-vantage extra delay. It is immutable once built.
type Table struct {
	Default Profile
	exact   map[netip.Addr]Profile
	byLen   [129]map[netip.Prefix]Profile // prefixes by length (either family; a family's host length unused)
	lens    []int                         // lengths present, longest first
	// Vantage[i] is the extra one-way delay for vantage i (the vantage at 198.18.i.2).
	Vantage map[int]time.Duration
}

// NewTable returns an empty table whose default is def.
func NewTable(def Profile) *Table {
	return &Table{Default: def, exact: map[netip.Addr]Profile{}, Vantage: map[int]time.Duration{}}
}

// Set assigns a profile to an address or prefix (a /32 is stored as an exact address).
func (t *Table) Set(p netip.Prefix, prof Profile) {
	p = p.Masked()
	if p.IsSingleIP() {
		t.exact[p.Addr()] = prof
		return
	}
	b := p.Bits()
	if t.byLen[b] == nil {
		t.byLen[b] = map[netip.Prefix]Profile{}
		t.lens = append(t.lens, b)
		sort.Sort(sort.Reverse(sort.IntSlice(t.lens)))
	}
	t.byLen[b][p] = prof
}

// SetAddr assigns a profile to one address.
func (t *Table) SetAddr(a netip.Addr, prof Profile) { t.exact[a] = prof }

// Lookup implements Paths.
func (t *Table) Lookup(a netip.Addr) Profile {
	if p, ok := t.exact[a]; ok {
		return p
	}
	for _, b := range t.lens {
		pfx, _ := a.Prefix(b)
		if p, ok := t.byLen[b][pfx]; ok {
			return p
		}
	}
	return t.Default
}

// Len is the number of exact addresses and prefixes in the table.
func (t *Table) Len() int {
	n := len(t.exact)
	for _, b := range t.lens {
		n += len(t.byLen[b])
	}
	return n
}

// The table file, one entry per line ('#' starts a comment):
//
//	default rtt=20ms jitter=0.2ms loss=0.001
//	198.19.5.0/24 rtt=5ms
//	198.19.0.7 rtt=150ms loss=0.05
//	2001:2:0:8001::/64 rtt=80ms
//	2001:2:0:8002::53 rtt=150ms
//	vantage 1 rtt=10ms          # extra round trip for the vantage at 198.18.1.2
//
// rtt is the round trip (each direction gets half), jitter the per-packet, per-direction
// uniform ± spread, loss the per-packet, per-direction drop probability.
// Durations use Go syntax (time.ParseDuration).

// ParseTable reads a table file.
func ParseTable(r io.Reader) (*Table, error) {
	t := NewTable(Profile{})
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i]
		}
		f := strings.Fields(s)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "default":
			p, err := parseAttrs(f[1:])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			t.Default = p
		case f[0] == "vantage":
			if len(f) < 2 {
				return nil, fmt.Errorf("line %d: vantage needs an index", line)
			}
			i, err := strconv.Atoi(f[1])
			if err != nil || i < 0 || i > 254 {
				return nil, fmt.Errorf("line %d: bad vantage index %q", line, f[1])
			}
			p, err := parseAttrs(f[2:])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			if p.Jitter != 0 || p.Loss != 0 {
				return nil, fmt.Errorf("line %d: a vantage entry takes only rtt", line)
			}
			t.Vantage[i] = p.OneWay
		default:
			pfx, err := parsePrefix(f[0])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			p, err := parseAttrs(f[1:])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			t.Set(pfx, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading path table: %w", err)
	}
	return t, nil
}

// parsePrefix reads an IPv4 or IPv6 address or prefix (no zone, no IPv4-mapped IPv6:
// the delay line sees each family's own addresses).
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Is4In6() {
			return netip.Prefix{}, fmt.Errorf("bad IP prefix %q", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Is4In6() || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("bad IP address %q", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// MaxDelay bounds every configured delay: a larger value is a typo, and would hold
// buffers for long.
const MaxDelay = 10 * time.Second

func parseAttrs(f []string) (Profile, error) {
	var p Profile
	for _, kv := range f {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return p, fmt.Errorf("want key=value, got %q", kv)
		}
		switch k {
		case "rtt", "jitter":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > MaxDelay {
				return p, fmt.Errorf("bad %s %q (a duration from 0 to %v)", k, v, MaxDelay)
			}
			if k == "rtt" {
				p.OneWay = d / 2
			} else {
				p.Jitter = d
			}
		case "loss":
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || !(x >= 0 && x <= 1) {
				return p, fmt.Errorf("bad loss %q (a probability from 0 to 1)", v)
			}
			p.Loss = x
		default:
			return p, fmt.Errorf("unknown attribute %q (rtt, jitter, loss)", k)
		}
	}
	return p, nil
}

// WriteTo writes the table in the format ParseTable reads (exact addresses sorted).
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	var n int64
	put := func(format string, a ...any) {
		k, _ := fmt.Fprintf(bw, format, a...)
		n += int64(k)
	}
	put("# doqscan delay-line path table: rtt is the round trip, jitter and loss per direction\n")
	put("default %s\n", attrs(t.Default))
	vs := make([]int, 0, len(t.Vantage))
	for v := range t.Vantage {
		vs = append(vs, v)
	}
	sort.Ints(vs)
	for _, v := range vs {
		put("vantage %d rtt=%v\n", v, 2*t.Vantage[v])
	}
	for i := len(t.lens) - 1; i >= 0; i-- {
		m := t.byLen[t.lens[i]]
		ps := make([]netip.Prefix, 0, len(m))
		for p := range m {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].Addr().Less(ps[j].Addr()) })
		for _, p := range ps {
			put("%v %s\n", p, attrs(m[p]))
		}
	}
	as := make([]netip.Addr, 0, len(t.exact))
	for a := range t.exact {
		as = append(as, a)
	}
	sort.Slice(as, func(i, j int) bool { return as[i].Less(as[j]) })
	for _, a := range as {
		put("%v %s\n", a, attrs(t.exact[a]))
	}
	return n, bw.Flush()
}

func attrs(p Profile) string {
	return fmt.Sprintf("rtt=%v jitter=%v loss=%s", 2*p.OneWay, p.Jitter, strconv.FormatFloat(p.Loss, 'g', -1, 64))
}
