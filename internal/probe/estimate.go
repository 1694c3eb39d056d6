package probe

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ScanEstimate is what a scan will cost, worked out before anything is sent.
type ScanEstimate struct {
	Addresses int64         // IPv4 addresses per port (this shard's share), blocklist subtracted
	Ports     int           // ports to send (those an earlier run finished are not counted)
	Runs      int           // zmap runs (several ports share one with zmap 4.x)
	Probes    int64         // packets: addresses x ports x probes per address
	RatePPS   float64       // packets/s (from --rate or --bandwidth); 0: unlimited
	Duration  time.Duration // sending time plus each run's cooldown; 0 with an unlimited rate
}

// String is one line for the operator.
func (e ScanEstimate) String() string {
	if e.RatePPS <= 0 {
		return fmt.Sprintf("%d probes (%d addresses x %d ports) in %d zmap runs at an unlimited rate", e.Probes, e.Addresses, e.Ports, e.Runs)
	}
	return fmt.Sprintf("about %s: %d probes (%d addresses x %d ports) at %.0f packets/s in %d zmap runs",
		FormatDuration(e.Duration), e.Probes, e.Addresses, e.Ports, e.RatePPS, e.Runs)
}

// FormatDuration is "17d 3h", "2h 5m", "42s".
func FormatDuration(d time.Duration) string {
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd %dh", d/(24*time.Hour), (d%(24*time.Hour))/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh %dm", d/time.Hour, (d%time.Hour)/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dm %ds", d/time.Minute, (d%time.Minute)/time.Second)
	}
	return d.Round(time.Second).String()
}

// DefaultConfirmAbove is the estimated duration above which an internet-wide scan needs
// ScanConfig.Confirmed (zprobe scan --yes).
const DefaultConfirmAbove = time.Hour

// ErrNeedsConfirmation says an internet-wide scan would take longer than the threshold
// and was not confirmed (--yes): a refused command line (exit 2).
var ErrNeedsConfirmation = errors.New("scan not confirmed")

// ethOverhead is what zmap counts per probe besides the UDP payload when it derives a
// rate from a bandwidth: Ethernet (14), IPv4 (20) and UDP (8) headers, and the 24 bytes
// of preamble, frame check and gap it adds (zmap's send.c).
const ethOverhead = 14 + 20 + 8 + 24

// rateFromBandwidth reads zmap's -B notation (1G, 500M, 100K, bits/s) as packets/s of a
// payload of size bytes.
func rateFromBandwidth(bw string, size int) (float64, error) {
	mult := 1.0
	switch {
	case strings.HasSuffix(bw, "G"):
		mult, bw = 1e9, strings.TrimSuffix(bw, "G")
	case strings.HasSuffix(bw, "M"):
		mult, bw = 1e6, strings.TrimSuffix(bw, "M")
	case strings.HasSuffix(bw, "K"):
		mult, bw = 1e3, strings.TrimSuffix(bw, "K")
	}
	v, err := strconv.ParseFloat(bw, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: bandwidth %q", ErrBadRate, bw)
	}
	return v * mult / float64((size+ethOverhead)*8), nil
}

// addressCount is the number of IPv4 addresses a scan's targets cover, less the
// blocklist for an internet-wide scan (prefixes nest or are disjoint; nested ones count
// once).
func addressCount(s *Safety) int64 {
	if !s.InternetWide {
		var n int64
		for _, t := range s.Targets {
			if t.Addr().Is4() {
				n += 1 << (32 - t.Bits())
			}
		}
		return n
	}
	var ps []netip.Prefix
	if s.List != nil {
		for _, e := range s.List.Effective() {
			if e.Prefix.Addr().Is4() {
				ps = append(ps, e.Prefix.Masked())
			}
		}
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	n := int64(1) << 32
	var last netip.Prefix
	for _, p := range ps {
		if last.IsValid() && last.Overlaps(p) {
			continue // sorted: p lies inside last
		}
		n -= 1 << (32 - p.Bits())
		last = p
	}
	return max(n, 0)
}

// Estimate works out a scan's cost: groups are the zmap runs (each a list of ports),
// size the largest probe payload.
func Estimate(s *Safety, z ZmapRun, shards int, groups [][]uint16, size int) (ScanEstimate, error) {
	e := ScanEstimate{Addresses: addressCount(s) / int64(max(shards, 1)), Runs: len(groups)}
	for _, g := range groups {
		e.Ports += len(g)
	}
	e.Probes = e.Addresses * int64(e.Ports) * int64(max(z.ProbesPerHost, 1))
	switch {
	case z.Bandwidth != "", z.Rate > 0:
		r, err := z.PacketsPerSecond(size)
		if err != nil {
			return e, err
		}
		e.RatePPS = r
	}
	if e.RatePPS > 0 {
		send := time.Duration(float64(e.Probes) / e.RatePPS * float64(time.Second))
		e.Duration = send + time.Duration(e.Runs*z.Cooldown)*time.Second
	}
	return e, nil
}
