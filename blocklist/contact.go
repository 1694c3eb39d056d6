package blocklist

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/store"
)

// HomeDir is the blocklist directory of the installation: <project home>/blocklist (see
// internal/home). It is returned whether or not it exists: a missing directory is the
// caller's error to report (Dir fails on it), never a reason to run without the
// operator's exclusions.
func HomeDir() string { return home.Path("blocklist") }

// DefaultDir is HomeDir, the default of every tool's --blocklist-dir.
func DefaultDir() string {
	return HomeDir()
}

// OptOuts returns the accepted opt-outs in the database as entries. It reads no
// requester's details (email, note, source address): a vantage point's database role may
// not (docs/fleet.md), and the blocklist files written from these entries name the
// request by its id and date only.
func OptOuts(ctx context.Context, s *store.Store) ([]Entry, error) {
	rows, err := s.Pool.Query(ctx, `SELECT request_id, prefix, created_at FROM optout_requests
		WHERE status = 'accepted' ORDER BY prefix, request_id`)
	if err != nil {
		return nil, fmt.Errorf("read opt-outs: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var id int64
		var p netip.Prefix
		var created time.Time
		if err := rows.Scan(&id, &p, &created); err != nil {
			return nil, fmt.Errorf("read opt-outs: %w", err)
		}
		out = append(out, Entry{Prefix: p.Masked(), Source: SourceOptOut, Origin: "optout_requests",
			Note: fmt.Sprintf("request %d of %s", id, created.UTC().Format(time.DateOnly))})
	}
	return out, rows.Err()
}

// ForContact is the list verify and measure consult before they contact an address, so
// that an opt-out is honoured by every later scan AND measurement (the opt-out page's
// promise): the reserved ranges, the *.conf files in dir ("": none; a named directory
// that is missing is an error) and the accepted opt-outs in s. The lab space
// (LabPrefixes) is re-opened in the reserved ranges: verify and measure contact only
// addresses a scan found or an operator listed, and the testbed lives there. Files and
// opt-outs inside the lab space still exclude.
func ForContact(ctx context.Context, s *store.Store, dir string) (*List, error) {
	entries := Reserved()
	if dir != "" {
		files, err := Dir(dir)
		if err != nil {
			return nil, err
		}
		entries = append(entries, files...)
	}
	if s != nil {
		opt, err := OptOuts(ctx, s)
		if err != nil {
			return nil, err
		}
		entries = append(entries, opt...)
	}
	return Build(entries, LabPrefixes)
}

// ExcludeForContact drops the items whose address (addr) the ForContact list excludes,
// before anything is sent to them, logging each one, and returns the kept items (in
// items' backing array) and how many were dropped. what names an item in the logs
// ("resolver", "target").
func ExcludeForContact[T any](ctx context.Context, s *store.Store, dir string, items []T, addr func(T) netip.Addr, what string, log *slog.Logger) ([]T, int, error) {
	bl, err := ForContact(ctx, s, dir)
	if err != nil {
		return nil, 0, err
	}
	kept := items[:0]
	for _, it := range items {
		a := addr(it)
		if why := bl.Why(a); len(why) > 0 {
			log.Info(what+" excluded: not contacted", "addr", a, "by", why[0].Source, "entry", why[0].Prefix, "origin", why[0].Origin)
			continue
		}
		kept = append(kept, it)
	}
	n := len(items) - len(kept)
	if n > 0 {
		log.Warn(what+"s excluded by the blocklist or an opt-out", "excluded", n, "kept", len(kept))
	}
	return kept, n, nil
}
