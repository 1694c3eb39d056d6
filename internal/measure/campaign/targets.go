package campaign

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/store"
)

// Endpoint is one (protocol, port) of a resolver, with the DoQ ALPN to offer.
type Endpoint struct {
	Protocol measure.Protocol
	Port     uint16
	ALPN     string // DoQ: the verified ALPN
}

// Target is one resolver and the endpoints to measure on it.
type Target struct {
	Addr       netip.Addr
	ServerName string
	Endpoints  []Endpoint
}

// defaultEndpoints are the optimistic endpoints of every resolver: each protocol on
// its default port (DoUDP and DoTCP on 53, DoT on 853, DoH and DoH3 on 443; DoQ on 853
// with the first DoQ ALPN, though DoQ endpoints normally come from verification).
func defaultEndpoints(p measure.Protocol) []Endpoint {
	if !slices.Contains(measure.Protocols, p) {
		return nil
	}
	ep := Endpoint{Protocol: p, Port: p.DefaultPort()}
	if p == measure.DoQ {
		ep.ALPN = doq.Versions[0].ALPN
	}
	return []Endpoint{ep}
}

// ParseTargets reads a targets file (name is its name in errors): one resolver per line,
//
//	ADDRESS [sni=NAME] [PROTOCOL=PORT[/ALPN] ...]
//
// e.g. "198.19.0.7 doq=853/doq doq=784/doq-i02". A protocol not named gets its default
// endpoint; '#' starts a comment. A resolver listed on several lines is measured once,
// with the endpoints of all its lines (MergeTargets). A bad or too long line is a
// *listfile.LineError naming the line.
func ParseTargets(r io.Reader, name string) ([]Target, error) {
	return targetsFile.Scan(r, name)
}

// ReadTargetsFile reads the targets file at path ("-": standard input; see
// ParseTargets); a file that cannot be opened is a *listfile.OpenError.
func ReadTargetsFile(path string) ([]Target, error) {
	return targetsFile.ReadFile(path)
}

// MergeTargets merges the targets that share an address, in the order of their first
// appearance: a resolver's rows are keyed by its address (measurements, and a restarted
// round skips the addresses already stored), so two targets with one address would be
// measured twice and stored once. The merged target has the endpoints of all of them,
// each (protocol, port) once. Two different server names, or two ALPNs for one DoQ
// port, are an error: the rows could not tell them apart.
func MergeTargets(targets []Target) ([]Target, error) {
	k := listfile.Keyed[netip.Addr, Target]{Merge: mergeTarget}
	for _, t := range targets {
		if err := k.Add(t.Addr, t); err != nil {
			return nil, err
		}
	}
	return k.Items(), nil
}

// targetsFile reads a targets file's lines, merged by address.
var targetsFile = listfile.Entries[netip.Addr, Target]{
	Parse: func(l listfile.Line) (netip.Addr, Target, error) {
		t, err := parseTarget(l.Fields())
		return t.Addr, t, err
	},
	Merge: mergeTarget,
}

// mergeTarget adds next's endpoints (and server name) to the target kept for the same
// address.
func mergeTarget(kept *Target, next Target) error {
	if next.ServerName != "" && kept.ServerName != "" && next.ServerName != kept.ServerName {
		return fmt.Errorf("%s: sni=%s, but an earlier entry has sni=%s (one server name per resolver)", next.Addr, next.ServerName, kept.ServerName)
	}
	if kept.ServerName == "" {
		kept.ServerName = next.ServerName
	}
	eps := kept.Endpoints
	for _, ep := range next.Endpoints {
		var err error
		if eps, err = addEndpoint(eps, ep); err != nil {
			return fmt.Errorf("%s: %w", next.Addr, err)
		}
	}
	kept.Endpoints = eps
	return nil
}

// addEndpoint appends ep unless its (protocol, port) is there already; the same
// (protocol, port) with another ALPN is an error.
func addEndpoint(eps []Endpoint, ep Endpoint) ([]Endpoint, error) {
	for _, e := range eps {
		if e.Protocol == ep.Protocol && e.Port == ep.Port {
			if e.ALPN != ep.ALPN {
				return eps, fmt.Errorf("%s=%d with ALPN %q and %q (one ALPN per port)", ep.Protocol, ep.Port, e.ALPN, ep.ALPN)
			}
			return eps, nil
		}
	}
	return append(eps, ep), nil
}

// parseTarget parses the fields of one targets line.
func parseTarget(f []string) (Target, error) {
	addr, err := netip.ParseAddr(f[0])
	if err != nil {
		return Target{}, err
	}
	if addr.Zone() != "" {
		return Target{}, fmt.Errorf("%q: zoned addresses are not targets", f[0])
	}
	t := Target{Addr: addr.Unmap()}
	named := map[measure.Protocol]bool{}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Target{}, fmt.Errorf("%q is not PROTOCOL=PORT[/ALPN]", kv)
		}
		if k == "sni" {
			if _, ok := dns.IsDomainName(v); !ok || v == "" || net.ParseIP(v) != nil {
				return Target{}, fmt.Errorf("sni=%q is not a host name", v)
			}
			if t.ServerName != "" && t.ServerName != v {
				return Target{}, fmt.Errorf("two server names (sni=%s, sni=%s)", t.ServerName, v)
			}
			t.ServerName = v
			continue
		}
		p := measure.Protocol(k)
		if _, err := measure.For(p); err != nil {
			return Target{}, err
		}
		portS, alpn, _ := strings.Cut(v, "/")
		port, err := strconv.ParseUint(portS, 10, 16)
		if err != nil || port == 0 {
			return Target{}, fmt.Errorf("%s: port %q: want 1..65535", k, portS)
		}
		if p == measure.DoQ {
			if alpn == "" {
				alpn = doq.Versions[0].ALPN
			}
			if _, ok := doq.Lookup(alpn); !ok {
				return Target{}, fmt.Errorf("unknown DoQ ALPN %q", alpn)
			}
		}
		named[p] = true
		if t.Endpoints, err = addEndpoint(t.Endpoints, Endpoint{p, uint16(port), alpn}); err != nil {
			return Target{}, err
		}
	}
	for _, p := range measure.Protocols {
		if !named[p] {
			t.Endpoints = append(t.Endpoints, defaultEndpoints(p)...)
		}
	}
	return t, nil
}

// RunSelection names the verification run a round measures when no run id is given:
// the newest of Vantage's runs with Label that has DoQ-verified resolvers.
type RunSelection struct {
	Vantage string // measure: its own vantage point unless --run-vantage
	Label   string // the verification run's label (--run-label, default "weekly")
}

// SelectedRun is the run a selection found.
type SelectedRun struct {
	RunID   int64
	ISOWeek string
	Vantage string
	Label   string
}

// LatestRun returns the newest verification run of sel's vantage point and label with
// DoQ-verified resolvers. Another vantage point's runs are never taken unless sel names
// it: several vantage points write one database, and each measures its own list.
func LatestRun(ctx context.Context, s *store.Store, sel RunSelection) (SelectedRun, error) {
	sel.Label = cmp.Or(sel.Label, "weekly")
	if sel.Vantage == "" {
		return SelectedRun{}, errors.New("run selection names no vantage point")
	}
	r := SelectedRun{Vantage: sel.Vantage, Label: sel.Label}
	err := s.Pool.QueryRow(ctx, `SELECT r.run_id, r.iso_week FROM verification_runs r
		WHERE r.vantage_id = $1 AND r.label = $2
		  AND EXISTS (SELECT 1 FROM verification_results v WHERE v.run_id = r.run_id AND v.outcome = 'doq-verified')
		ORDER BY r.started_at DESC, r.run_id DESC LIMIT 1`, sel.Vantage, sel.Label).Scan(&r.RunID, &r.ISOWeek)
	if err != nil {
		return r, fmt.Errorf("latest verification run of vantage point %q, label %q, with DoQ-verified resolvers: %w",
			sel.Vantage, sel.Label, err)
	}
	return r, nil
}

// LoadTargets returns the DoQ-verified resolvers of a verification run, each with its
// verified DoQ ports (and ALPNs) plus the default endpoints of the other protocols.
func LoadTargets(ctx context.Context, s *store.Store, runID int64) ([]Target, error) {
	rows, err := s.Pool.Query(ctx, `SELECT address, port, coalesce(alpn, ''), coalesce(sni, '')
		FROM verification_results WHERE run_id = $1 AND outcome = 'doq-verified' ORDER BY address, port`, runID)
	if err != nil {
		return nil, fmt.Errorf("load targets of run %d: %w", runID, err)
	}
	defer rows.Close()
	byAddr := map[netip.Addr]*Target{}
	for rows.Next() {
		var (
			addr      netip.Addr
			port      int32
			alpn, sni string
		)
		if err := rows.Scan(&addr, &port, &alpn, &sni); err != nil {
			return nil, fmt.Errorf("load targets: %w", err)
		}
		if alpn == "" {
			alpn = doq.Versions[0].ALPN
		}
		t := byAddr[addr]
		if t == nil {
			t = &Target{Addr: addr.Unmap(), ServerName: sni}
			byAddr[addr] = t
		}
		t.Endpoints = append(t.Endpoints, Endpoint{measure.DoQ, uint16(port), alpn})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load targets: %w", err)
	}
	out := make([]Target, 0, len(byAddr))
	for _, t := range byAddr {
		for _, p := range measure.Protocols {
			if p != measure.DoQ {
				t.Endpoints = append(t.Endpoints, defaultEndpoints(p)...)
			}
		}
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Less(out[j].Addr) })
	return out, nil
}
