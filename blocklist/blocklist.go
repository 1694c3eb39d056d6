// Package blocklist builds the list of ranges a scan must never send a packet to: the
// reserved ranges (reserved.conf, embedded), the operator's files in blocklist/ (*.conf,
// zmap format) and the accepted opt-outs from the database. It writes the merged list in
// zmap's format (-b FILE) and says whether an address is excluded and why.
//
// The one exception is a lab carve-out: a prefix explicitly allowed for a testbed may
// re-open the part of a reserved range it covers, and only when it lies inside
// 198.18.0.0/15 (RFC 2544, the testbed's space) or loopback. Nothing re-opens a range
// from a file or an opt-out.
package blocklist

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/doqscan/doqscan/internal/listfile"
)

//go:embed reserved.conf
var reservedConf string

// ReservedFile is the name of the reserved-ranges file; Dir skips it (it is embedded).
const ReservedFile = "reserved.conf"

// Source says where an entry came from.
type Source string

// Sources of entries.
const (
	SourceReserved Source = "reserved"
	SourceFile     Source = "file"
	SourceOptOut   Source = "opt-out"
)

// Entry is one blocked prefix.
type Entry struct {
	Prefix netip.Prefix
	Source Source
	Origin string // file name, or "optout_requests" row
	Note   string // the line's comment, or the opt-out request's id and date
}

// LabPrefixes are the only ranges a carve-out may re-open: the benchmarking spaces the
// testbed uses (RFC 2544 for IPv4, RFC 5180 for IPv6), and loopback. The lab guard
// (internal/labnet) still lets a lab address be contacted only over the testbed's links.
var LabPrefixes = []netip.Prefix{
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("2001:2::/48"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
}

// Reserved returns the embedded reserved ranges.
func Reserved() []Entry {
	e, err := Parse(strings.NewReader(reservedConf), SourceReserved, ReservedFile)
	if err != nil {
		panic("blocklist: embedded reserved.conf: " + err.Error()) // a test guards this
	}
	return e
}

// Parse reads zmap-format lines: a CIDR or address, optionally followed by '#' comment.
// A bad or too long line is a *listfile.LineError naming origin and the line.
func Parse(r io.Reader, src Source, origin string) ([]Entry, error) {
	var out []Entry
	err := listfile.Scan(r, origin, func(l listfile.Line) error {
		p, err := ParsePrefix(l.Text)
		if err != nil {
			return err
		}
		out = append(out, Entry{Prefix: p, Source: src, Origin: origin, Note: l.Comment})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ParsePrefix reads a CIDR or a bare address (as a /32 or /128), masked.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, fmt.Errorf("bad prefix %q: %w", s, err)
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return p, fmt.Errorf("bad prefix %q: IPv4-mapped prefix shorter than /96", s)
			}
			return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked(), nil
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("bad address %q: %w", s, err)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Dir reads every *.conf file in dir except reserved.conf, in name order. A missing
// directory is an error: the scan must not silently lose its exclusions.
func Dir(dir string) ([]Entry, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.conf"))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, &listfile.OpenError{File: dir, Err: fmt.Errorf("blocklist directory: %w", err)}
	}
	sort.Strings(names)
	var out []Entry
	for _, n := range names {
		if filepath.Base(n) == ReservedFile {
			continue
		}
		f, err := listfile.Open(n) // a FIFO or directory named *.conf: an error, never a wait
		if err != nil {
			return nil, err
		}
		e, err := Parse(f, SourceFile, n)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, e...)
	}
	return out, nil
}

// List is a merged blocklist with its lab carve-outs.
type List struct {
	Entries  []Entry        // every input entry, as given
	CarveOut []netip.Prefix // lab prefixes re-opened inside reserved ranges
}

// Build merges entries (reserved first by convention) with the carve-outs. A carve-out
// outside LabPrefixes is refused.
func Build(entries []Entry, carveOut []netip.Prefix) (*List, error) {
	for _, c := range carveOut {
		if !insideLab(c) {
			return nil, fmt.Errorf("carve-out %s is outside the lab ranges %v: refusing to unblock it", c, LabPrefixes)
		}
	}
	return &List{Entries: entries, CarveOut: carveOut}, nil
}

func insideLab(p netip.Prefix) bool {
	for _, l := range LabPrefixes {
		if l.Bits() <= p.Bits() && l.Contains(p.Addr()) && p.Addr().BitLen() == l.Addr().BitLen() {
			return true
		}
	}
	return false
}

func covers(outer, inner netip.Prefix) bool {
	return outer.Addr().BitLen() == inner.Addr().BitLen() && outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// Why returns the entries that block a (none: not blocked). A reserved entry whose
// address lies in a carve-out does not count.
func (l *List) Why(a netip.Addr) []Entry {
	a = a.Unmap()
	var out []Entry
	for _, e := range l.Entries {
		if !e.Prefix.Contains(a) {
			continue
		}
		if e.Source == SourceReserved && l.carved(a) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// Blocked says whether a is excluded.
func (l *List) Blocked(a netip.Addr) bool { return len(l.Why(a)) > 0 }

func (l *List) carved(a netip.Addr) bool {
	for _, c := range l.CarveOut {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

// Effective returns the blocked prefixes after carve-outs: reserved prefixes minus the
// carve-outs (split into the remaining CIDRs), files and opt-outs unchanged, each with
// the entry it came from.
func (l *List) Effective() []Entry {
	var out []Entry
	for _, e := range l.Entries {
		if e.Source != SourceReserved {
			out = append(out, e)
			continue
		}
		parts := []netip.Prefix{e.Prefix}
		for _, c := range l.CarveOut {
			var next []netip.Prefix
			for _, p := range parts {
				next = append(next, subtract(p, c)...)
			}
			parts = next
		}
		for _, p := range parts {
			x := e
			x.Prefix = p
			if p != e.Prefix {
				x.Note = e.Note + " (minus lab carve-out)"
			}
			out = append(out, x)
		}
	}
	return out
}

// subtract returns p minus c as CIDRs.
func subtract(p, c netip.Prefix) []netip.Prefix {
	switch {
	case covers(c, p):
		return nil
	case !covers(p, c):
		return []netip.Prefix{p}
	}
	// c is strictly inside p: split p in halves until c is reached.
	var out []netip.Prefix
	cur := p
	for cur.Bits() < c.Bits() {
		lo, hi := halves(cur)
		if lo.Contains(c.Addr()) {
			out = append(out, hi)
			cur = lo
		} else {
			out = append(out, lo)
			cur = hi
		}
	}
	return out
}

// halves splits a prefix into its two children.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	b := p.Addr().AsSlice()
	i := p.Bits()
	b[i/8] |= 0x80 >> (i % 8)
	hiAddr, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(hiAddr, bits)
}

// WriteZmap writes the effective IPv4 blocklist in zmap's format (zmap 2.1.1 scans IPv4
// only) and returns how many lines it wrote.
func (l *List) WriteZmap(w io.Writer) (int, error) {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# doqscan blocklist for zmap -b: reserved ranges, blocklist/*.conf, opt-outs (generated)\n")
	for _, c := range l.CarveOut {
		fmt.Fprintf(bw, "# lab carve-out (explicitly allowed testbed prefix): %s\n", c)
	}
	n := 0
	for _, e := range l.Effective() {
		if !e.Prefix.Addr().Is4() {
			continue
		}
		note := string(e.Source)
		if e.Origin != "" && e.Source != SourceReserved {
			note += " " + e.Origin
		}
		if e.Note != "" {
			note += ": " + strings.ReplaceAll(e.Note, "\n", " ")
		}
		fmt.Fprintf(bw, "%-20s # %s\n", e.Prefix, note)
		n++
	}
	return n, bw.Flush()
}
