package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/store"
)

// Safety is the target policy every sender obeys: targets come from explicit prefixes
// or an allowlist (or, deliberately, the whole internet), and the blocklist is always
// built from the reserved ranges, blocklist/*.conf and the database's opt-outs.
type Safety struct {
	Targets      []netip.Prefix // prefixes to scan (-w file for zmap)
	Testbed      *netip.Prefix  // lab carve-out: the only range re-opened in the reserved list
	InternetWide bool
	List         *blocklist.List
}

// ReadPrefixes reads a zmap-style allowlist or hitlist (CIDRs or addresses, # comments):
// the blocklist's format (blocklist.Parse), read for its prefixes.
func ReadPrefixes(r io.Reader, name string) ([]netip.Prefix, error) {
	entries, err := blocklist.Parse(r, blocklist.SourceFile, name)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, len(entries))
	for i, e := range entries {
		out[i] = e.Prefix
	}
	return out, nil
}

// ReadPrefixFile reads ReadPrefixes from a file (opened with listfile.Open: a file that
// cannot be opened, or is not a regular file, is a *listfile.OpenError).
func ReadPrefixFile(path string) ([]netip.Prefix, error) {
	f, err := listfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadPrefixes(f, path)
}

// ErrBadTargets refuses a target list the safety rules do not allow (a target outside
// the testbed prefix, a testbed prefix outside the lab ranges, --testbed with
// --internet-wide, no IPv4 target for zmap).
var ErrBadTargets = errors.New("targets refused")

// BuildSafety merges the blocklist (reserved + dir files + opt-outs) and checks the
// targets: in testbed mode every target must lie inside the testbed prefix (default:
// the prefix itself); otherwise targets are required unless internetWide.
func BuildSafety(targets []netip.Prefix, testbed *netip.Prefix, internetWide bool, dirEntries, optouts []blocklist.Entry) (*Safety, error) {
	var carve []netip.Prefix
	if testbed != nil {
		tb := testbed.Masked()
		testbed = &tb
		carve = []netip.Prefix{tb}
		if internetWide {
			return nil, fmt.Errorf("%w: --testbed and --internet-wide exclude each other", ErrBadTargets)
		}
		if len(targets) == 0 {
			targets = []netip.Prefix{tb}
		}
		for _, t := range targets {
			if !(tb.Bits() <= t.Bits() && tb.Contains(t.Addr()) && t.Addr().BitLen() == tb.Addr().BitLen()) {
				return nil, fmt.Errorf("%w: target %s is outside the testbed prefix %s", ErrBadTargets, t, tb)
			}
		}
	}
	if len(targets) == 0 && !internetWide {
		return nil, ErrNoTargets
	}
	entries := append(append(blocklist.Reserved(), dirEntries...), optouts...)
	l, err := blocklist.Build(entries, carve)
	if err != nil {
		if len(carve) > 0 { // the only input here a user gives: the testbed carve-out
			return nil, fmt.Errorf("%w: %w", ErrBadTargets, err)
		}
		return nil, err
	}
	return &Safety{Targets: targets, Testbed: testbed, InternetWide: internetWide, List: l}, nil
}

// InTargets says whether a lies inside the targets (always, internet-wide).
func (s *Safety) InTargets(a netip.Addr) bool {
	a = a.Unmap()
	return s.InternetWide || slices.ContainsFunc(s.Targets, func(t netip.Prefix) bool { return t.Contains(a) })
}

// Allowed says whether a may receive a probe: inside the targets (or internet-wide) and
// not blocked. why explains a refusal.
func (s *Safety) Allowed(a netip.Addr) (ok bool, why string) {
	a = a.Unmap()
	if !s.InTargets(a) {
		return false, "outside the allowlist"
	}
	if w := s.List.Why(a); len(w) > 0 {
		return false, fmt.Sprintf("blocklisted (%s %s %s)", w[0].Source, w[0].Prefix, w[0].Note)
	}
	return true, ""
}

// CheckLab applies the lab guard to the targets: every target prefix that reaches into
// a lab prefix (labnet.Prefixes) and is not blocklisted there is checked by its first
// address in that lab prefix (the guard decides once per lab prefix). Internet-wide
// runs reach no lab prefix: the reserved list excludes it, and --testbed, the only
// carve-out, does not combine with --internet-wide.
func (s *Safety) CheckLab(g *labnet.Guard) error {
	for _, t := range s.Targets {
		for _, l := range labnet.Prefixes {
			if !t.Overlaps(l) {
				continue
			}
			rep := l.Addr()
			if l.Contains(t.Addr()) {
				rep = t.Addr()
			}
			if ok, _ := s.Allowed(rep); !ok {
				continue
			}
			if err := g.Check(rep); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteAllowlist writes the IPv4 targets in zmap's -w format.
func (s *Safety) WriteAllowlist(w io.Writer) (int, error) {
	n := 0
	for _, t := range s.Targets {
		if !t.Addr().Is4() {
			continue
		}
		if _, err := fmt.Fprintln(w, t); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// PrepareSafety builds the blocklist (reserved + dir + database opt-outs), checks the
// targets, and refuses lab targets unless this process runs inside the testbed
// (Safety.CheckLab with g; nil: a guard of its own).
func PrepareSafety(ctx context.Context, s *store.Store, targets []netip.Prefix, testbed *netip.Prefix, internetWide bool, dir string, g *labnet.Guard) (*Safety, error) {
	var dirEntries []blocklist.Entry
	if dir != "" {
		var err error
		if dirEntries, err = blocklist.Dir(dir); err != nil {
			return nil, err
		}
	}
	var opt []blocklist.Entry
	if s != nil {
		var err error
		if opt, err = blocklist.OptOuts(ctx, s); err != nil {
			return nil, err
		}
	}
	safety, err := BuildSafety(targets, testbed, internetWide, dirEntries, opt)
	if err != nil {
		return nil, err
	}
	if g == nil {
		g = labnet.NewGuard()
	}
	if err := safety.CheckLab(g); err != nil {
		return nil, err
	}
	return safety, nil
}
