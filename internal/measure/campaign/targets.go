package campaign

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"

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
// its default port (internal/protocol); a Discovered protocol (DoQ, whose endpoints
// normally come from verification) with its first ALPN.
func defaultEndpoints(p measure.Protocol) []Endpoint {
	if !slices.Contains(measure.Protocols, p) {
		return nil
	}
	spec := p.Spec()
	ep := Endpoint{Protocol: p, Port: spec.DefaultPort()}
	if spec.Discovered {
		ep.ALPN = spec.DefaultALPN()
	}
	return []Endpoint{ep}
}

// ParseTargets reads a targets file (name is its name in errors) in the grammar verify
// shares (internal/listfile, Targets): one resolver per line,
//
//	ADDRESS[:PORT] [sni=NAME] [PROTOCOL=PORT[/ALPN] ...]
//
// e.g. "198.19.0.7 doq=853/doq doq=784/doq-i02", "198.19.0.7:784" (DoQ on 784). A
// protocol not named gets its default endpoint; '#' starts a comment. A resolver listed
// on several lines is measured once, with the endpoints of all its lines. A bad or too
// long line is a *listfile.LineError naming the line.
func ParseTargets(r io.Reader, name string) ([]Target, error) {
	ts, err := targetsFile.Scan(r, name)
	return fromList(ts), err
}

// ReadTargetsFile reads the targets file at path ("-": standard input; see
// ParseTargets); a file that cannot be opened is a *listfile.OpenError.
func ReadTargetsFile(path string) ([]Target, error) {
	ts, err := targetsFile.ReadFile(path)
	return fromList(ts), err
}

// targetsFile reads a round's targets: each line checked (measure.CheckTarget), with the
// default endpoint of every protocol it does not name.
var targetsFile = listfile.Targets{Expand: func(t listfile.Target) (listfile.Target, error) {
	t, err := measure.CheckTarget(t)
	if err != nil {
		return t, err
	}
	named := map[string]bool{}
	for _, ep := range t.Endpoints {
		named[ep.Protocol] = true
	}
	for _, p := range measure.Protocols {
		if !named[string(p)] {
			t.Endpoints = append(t.Endpoints, Target{}.toList(defaultEndpoints(p)...)...)
		}
	}
	return t, nil
}}

// MergeTargets merges the targets that share an address, in the order of their first
// appearance: a resolver's rows are keyed by its address, so two targets with one
// address would be measured twice and stored once. The merged target has the endpoints
// of all of them, each (protocol, port) once. Two different server names, or two ALPNs
// for one DoQ port, are an error: the rows could not tell them apart
// (listfile.MergeTarget, as for the lines of a targets file).
func MergeTargets(targets []Target) ([]Target, error) {
	k := listfile.Keyed[netip.Addr, listfile.Target]{Merge: listfile.MergeTarget}
	for _, t := range targets {
		if err := k.Add(t.Addr, listfile.Target{Addr: t.Addr, ServerName: t.ServerName, Endpoints: t.toList(t.Endpoints...)}); err != nil {
			return nil, err
		}
	}
	return fromList(k.Items()), nil
}

// toList converts endpoints to the targets file's form.
func (Target) toList(eps ...Endpoint) []listfile.Endpoint {
	out := make([]listfile.Endpoint, len(eps))
	for i, ep := range eps {
		out[i] = listfile.Endpoint{Protocol: string(ep.Protocol), Port: ep.Port, ALPN: ep.ALPN}
	}
	return out
}

// fromList converts targets of the targets file's form.
func fromList(ts []listfile.Target) []Target {
	out := make([]Target, len(ts))
	for i, t := range ts {
		out[i] = Target{Addr: t.Addr, ServerName: t.ServerName}
		for _, ep := range t.Endpoints {
			out[i].Endpoints = append(out[i].Endpoints, Endpoint{Protocol: measure.Protocol(ep.Protocol), Port: ep.Port, ALPN: ep.ALPN})
		}
	}
	return out
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
			if !p.Spec().Discovered {
				t.Endpoints = append(t.Endpoints, defaultEndpoints(p)...)
			}
		}
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Less(out[j].Addr) })
	return out, nil
}
