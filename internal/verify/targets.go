package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/store"
)

// DefaultPorts are the DoQ ports a scan's QUIC replies are verified on.
var DefaultPorts = []int32{doq.PortExperimental, doq.PortRFC9250, doq.PortDraft02}

// ReadTargets parses a targets file (name is its name in errors) in the grammar
// measure shares (internal/listfile, Targets): one resolver per line,
//
//	ADDRESS[:PORT] [sni=NAME] [PROTOCOL=PORT[/ALPN] ...]
//
// whose DoQ endpoints are verified: the port after the address and every doq=PORT, or
// DoQ on 853 (RFC 9250 §8.2) when the line names none ("198.19.0.7" is
// 198.19.0.7:853). Every --alpns is offered whatever ALPN a line names; its sni= is
// tried when a name seems required (after the certificate's names, before
// --sni-names); the endpoints of other protocols are checked and left to measure. A
// target listed twice is verified once: targets are keyed by (address, port), the key
// of their verification_results row; order is kept. A bad or too long line is a
// *listfile.LineError naming the line.
func ReadTargets(r io.Reader, name string) ([]Target, error) {
	ts, err := targetsFile.Scan(r, name)
	return doqTargets(ts), err
}

// ReadTargetsFile reads the targets file at path ("-": standard input); a file that
// cannot be opened is a *listfile.OpenError.
func ReadTargetsFile(path string) ([]Target, error) {
	ts, err := targetsFile.ReadFile(path)
	return doqTargets(ts), err
}

// targetsFile reads targets files: each line checked (measure.CheckTarget), with DoQ on
// 853 when it names no DoQ endpoint.
var targetsFile = listfile.Targets{Expand: func(t listfile.Target) (listfile.Target, error) {
	if !slices.ContainsFunc(t.Endpoints, func(ep listfile.Endpoint) bool { return ep.Protocol == string(measure.DoQ) }) {
		t.Endpoints = append(t.Endpoints, listfile.Endpoint{Protocol: string(measure.DoQ), Port: doq.PortRFC9250})
	}
	return measure.CheckTarget(t)
}}

// doqTargets returns the DoQ endpoints of targets (each (address, port) once: the
// targets are merged by address, their endpoints by protocol and port).
func doqTargets(ts []listfile.Target) []Target {
	var out []Target
	for _, t := range ts {
		for _, ep := range t.Endpoints {
			if ep.Protocol == string(measure.DoQ) {
				out = append(out, Target{Addr: netip.AddrPortFrom(t.Addr, ep.Port), ServerName: t.ServerName})
			}
		}
	}
	return out
}

// ScanSelection says which scan(s) to take targets from: an id, or the scans of one
// vantage point and label, of a week or the latest.
type ScanSelection struct {
	ScanID  *int64
	Week    string // ISO week; all shards of that week's scans; "" = the latest week
	Label   string // scan label; default "weekly"
	Vantage string // the scans' vantage point (verify: its own unless --scan-vantage); AnyVantage: all
}

// AnyVantage as ScanSelection.Vantage takes the scans of every vantage point: the shards
// of one scan split over several machines, verified together.
const AnyVantage = "*"

// ErrNoScan is returned when no scan matches the selection.
var ErrNoScan = errors.New("no scan matches")

// ResolveScans returns the scan ids of a selection and their ISO week. Without id, it
// takes every shard of the selection's vantage point and label in the week (without
// week: the week of their most recently started scan). Another vantage point's scans
// are never taken unless the selection names it: several vantage points write one
// database, and each verifies its own list.
func ResolveScans(ctx context.Context, s *store.Store, sel ScanSelection) (ids []int64, week string, err error) {
	label := sel.Label
	if label == "" {
		label = "weekly"
	}
	var rows interface {
		Next() bool
		Scan(...any) error
		Err() error
		Close()
	}
	switch {
	case sel.ScanID != nil:
		rows, err = s.Pool.Query(ctx, `SELECT scan_id, iso_week FROM scans WHERE scan_id = $1`, *sel.ScanID)
	case sel.Vantage == "":
		return nil, "", errors.New("scan selection names no vantage point")
	case sel.Vantage == AnyVantage && sel.Week != "":
		rows, err = s.Pool.Query(ctx, `SELECT scan_id, iso_week FROM scans
			WHERE iso_week = $1 AND label = $2 ORDER BY scan_id`, sel.Week, label)
	case sel.Vantage == AnyVantage:
		rows, err = s.Pool.Query(ctx, `SELECT s.scan_id, s.iso_week FROM scans s
			JOIN (SELECT iso_week FROM scans WHERE label = $1 ORDER BY started_at DESC, scan_id DESC LIMIT 1) l
			  USING (iso_week)
			WHERE s.label = $1 ORDER BY s.scan_id`, label)
	case sel.Week != "":
		rows, err = s.Pool.Query(ctx, `SELECT scan_id, iso_week FROM scans
			WHERE iso_week = $1 AND label = $2 AND vantage_id = $3 ORDER BY scan_id`, sel.Week, label, sel.Vantage)
	default:
		rows, err = s.Pool.Query(ctx, `SELECT s.scan_id, s.iso_week FROM scans s
			JOIN (SELECT iso_week FROM scans WHERE label = $1 AND vantage_id = $2
			       ORDER BY started_at DESC, scan_id DESC LIMIT 1) l USING (iso_week)
			WHERE s.label = $1 AND s.vantage_id = $2 ORDER BY s.scan_id`, label, sel.Vantage)
	}
	if err != nil {
		return nil, "", fmt.Errorf("select scans: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id, &week); err != nil {
			return nil, "", err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	if len(ids) == 0 {
		return nil, "", ErrNoScan
	}
	return ids, week, nil
}

// ScanTargets returns the QUIC-capable (address, port) pairs of the scans: replies
// classified 'quic-vn' on the given ports, with the versions they advertised.
func ScanTargets(ctx context.Context, s *store.Store, scanIDs []int64, ports []int32) ([]Target, error) {
	if len(ports) == 0 {
		ports = DefaultPorts
	}
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT ON (address, port) address, port, quic_versions
		FROM scan_replies WHERE scan_id = ANY($1) AND reply_kind = 'quic-vn' AND port = ANY($2)
		ORDER BY address, port, scan_id`, scanIDs, ports)
	if err != nil {
		return nil, fmt.Errorf("select scan targets: %w", err)
	}
	defer rows.Close()
	var out []Target
	for rows.Next() {
		var (
			a    netip.Addr
			port int32
			vs   []int64
		)
		if err := rows.Scan(&a, &port, &vs); err != nil {
			return nil, fmt.Errorf("scan target row: %w", err)
		}
		out = append(out, Target{Addr: netip.AddrPortFrom(a.Unmap(), uint16(port)), ScanVersions: vs})
	}
	return out, rows.Err()
}

// portsString formats ports for logs.
func portsString(ps []int32) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}
