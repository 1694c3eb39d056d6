// Package pace holds the scan pacing the opt-out page promises (at most MaxPerSlash16
// probes per second on average towards any IPv4 /16) and the checks zprobe runs before
// it sends a packet.
package pace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sort"

	"github.com/doqscan/doqscan/blocklist"
)

// MaxPerSlash16 is the page's promise on scan pacing: the expected number of probes per
// second towards any IPv4 /16, over the whole scan. zmap sends to the scanned addresses
// in the order of a random cyclic permutation, so a /16 that holds a share f of the
// scanned addresses receives on average f × the scan's rate; an internet-wide scan at
// 1,000,000 packets per second gives every fully scanned /16 about 18 per second, a scan
// of one /16 gives it the whole rate. CheckScanPace refuses the latter.
const MaxPerSlash16 = 250

// ErrPace is what CheckScanPace and CheckSendPace errors wrap.
var ErrPace = errors.New("the scan would exceed the opt-out page's per-/16 rate")

// PaceError says which /16 a scan would probe too fast, and how fast.
type PaceError struct {
	Rate       float64      // the scan's total probes per second (+Inf: unlimited)
	PerSlash16 float64      // the expected rate towards Prefix
	Prefix     netip.Prefix // the /16 with the most scanned addresses
	Scanned    uint64       // addresses scanned in all
}

func (e *PaceError) Error() string {
	return fmt.Sprintf("%v: %.0f probes/s in all over %d addresses send %.0f/s on average to %s, over %d/s; lower --rate or scan more addresses",
		ErrPace, e.Rate, e.Scanned, e.PerSlash16, e.Prefix, MaxPerSlash16)
}

func (e *PaceError) Unwrap() error { return ErrPace }

// PerSlash16 returns the expected probe rate towards the busiest /16 of a zmap scan at
// rate probes per second (per port: zmap runs once per port) over the IPv4 addresses of
// targets not in excluded, with that /16 and the number of addresses scanned. IPv6
// prefixes are ignored (zmap scans IPv4). Overlaps are counted once.
func PerSlash16(rate float64, targets, excluded []netip.Prefix) (perSlash16 float64, busiest netip.Prefix, scanned uint64) {
	t := ranges(targets)
	if len(targets) == 0 {
		t = []span{{0, math.MaxUint32}} // zmap's default target: everything not excluded
	}
	in := subtract(t, ranges(excluded))
	var per [1 << 16]uint32
	for _, r := range in {
		for lo := r.lo; ; {
			end := lo | 0xffff
			if end > r.hi {
				end = r.hi
			}
			per[lo>>16] += uint32(end - lo + 1)
			scanned += uint64(end-lo) + 1
			if end == r.hi {
				break
			}
			lo = end + 1
		}
	}
	if scanned == 0 {
		return 0, netip.Prefix{}, 0
	}
	best := 0
	for i, n := range per {
		if n > per[best] {
			best = i
		}
	}
	var b [4]byte
	binary.BigEndian.PutUint16(b[:2], uint16(best))
	return rate * float64(per[best]) / float64(scanned), netip.PrefixFrom(netip.AddrFrom4(b), 16), scanned
}

// CheckScanPace returns a *PaceError when a zmap scan at rate probes per second (0:
// zmap's default, 10,000; negative: unlimited) over targets minus excluded would send
// more than MaxPerSlash16 per second on average to some /16. A scan whose targets all lie
// in the lab space (blocklist.LabPrefixes: the testbed, loopback) is not the internet
// and is not limited.
func CheckScanPace(rate float64, targets, excluded []netip.Prefix) error {
	if allLab(targets) {
		return nil
	}
	switch {
	case rate == 0:
		rate = 10000
	case rate < 0:
		rate = math.Inf(1)
	}
	per, p, n := PerSlash16(rate, targets, excluded)
	if per > MaxPerSlash16 {
		return &PaceError{Rate: rate, PerSlash16: per, Prefix: p, Scanned: n}
	}
	return nil
}

// CheckSendPace is CheckScanPace for the built-in sender (zprobe send): it probes a
// hitlist in its given order, so all of its rate may go to one /16 for as long as that
// /16's addresses last; the rate itself must therefore be within MaxPerSlash16 unless
// every target is in the lab space.
func CheckSendPace(rate float64, targets []netip.Addr) error {
	lab := true
	for _, a := range targets {
		if !inLab(a) {
			lab = false
			break
		}
	}
	if lab || rate <= MaxPerSlash16 {
		return nil
	}
	return &PaceError{Rate: rate, PerSlash16: rate, Prefix: netip.PrefixFrom(targets[0], 16).Masked(), Scanned: uint64(len(targets))}
}

func allLab(targets []netip.Prefix) bool {
	if len(targets) == 0 {
		return false // internet-wide
	}
	for _, t := range targets {
		ok := false
		for _, l := range blocklist.LabPrefixes {
			if l.Bits() <= t.Bits() && l.Contains(t.Addr()) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func inLab(a netip.Addr) bool {
	for _, l := range blocklist.LabPrefixes {
		if l.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// span is an inclusive range of IPv4 addresses as integers.
type span struct{ lo, hi uint32 }

// ranges returns the IPv4 prefixes of ps as sorted, merged spans.
func ranges(ps []netip.Prefix) []span {
	var out []span
	for _, p := range ps {
		p = p.Masked()
		if !p.Addr().Is4() {
			continue
		}
		a := p.Addr().As4()
		lo := binary.BigEndian.Uint32(a[:])
		out = append(out, span{lo, lo | uint32(uint64(1)<<(32-p.Bits())-1)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lo < out[j].lo })
	var merged []span
	for _, s := range out {
		if n := len(merged); n > 0 && uint64(s.lo) <= uint64(merged[n-1].hi)+1 {
			merged[n-1].hi = max(merged[n-1].hi, s.hi)
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// subtract returns the spans of a not in b (both sorted and merged).
func subtract(a, b []span) []span {
	var out []span
	j := 0
	for _, s := range a {
		lo := uint64(s.lo)
		for j < len(b) && b[j].hi < s.lo {
			j++
		}
		for k := j; k < len(b) && uint64(b[k].lo) <= uint64(s.hi); k++ {
			if uint64(b[k].lo) > lo {
				out = append(out, span{uint32(lo), b[k].lo - 1})
			}
			lo = uint64(b[k].hi) + 1
		}
		if lo <= uint64(s.hi) {
			out = append(out, span{uint32(lo), s.hi})
		}
	}
	return out
}
