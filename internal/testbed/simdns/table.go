package simdns

import (
	"net/netip"
	"slices"
)

// Table is a Directory held in memory: address -> protocol -> behaviour. Tests and tools
// that do not read a population use it.
type Table map[netip.Addr]map[Protocol]Behaviour

// Set assigns b to addr on every protocol of ps.
func (t Table) Set(addr netip.Addr, b Behaviour, ps ...Protocol) {
	m := t[addr]
	if m == nil {
		m = map[Protocol]Behaviour{}
		t[addr] = m
	}
	for _, p := range ps {
		m[p] = b
	}
}

// Behaviour implements Directory.
func (t Table) Behaviour(addr netip.Addr, p Protocol) (Behaviour, bool) {
	b, ok := t[addr][p]
	return b, ok
}

// FastOpen implements Directory.
func (t Table) FastOpen(p Protocol) []netip.Addr {
	var out []netip.Addr
	for a, m := range t {
		if b, ok := m[p]; ok && b.FastOpen {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
