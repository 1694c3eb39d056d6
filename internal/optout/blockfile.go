package optout

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/store"
)

// OptOutFile is the file under blocklist/ that holds the accepted opt-outs. It is
// generated from the database: edit the database (or blocklist/*.conf by hand), not it.
const OptOutFile = "optout.conf"

// Accepted reads every accepted opt-out, oldest first.
func Accepted(ctx context.Context, s *store.Store) ([]store.OptOutRequest, error) {
	return store.Select[store.OptOutRequest](ctx, s,
		`SELECT prefix, email, note, source_addr, status, created_at FROM optout_requests
		 WHERE status = 'accepted' ORDER BY created_at, prefix`)
}

// WriteBlocklist writes the accepted opt-outs to dir/optout.conf in zmap's format (one
// CIDR a line, '#' comments with date and requester) atomically: a scan reading the file
// at any moment sees the old list or the new one, never half of one. dir must exist: a
// missing blocklist directory is the operator's to create (the scans refuse to run
// without it), not this writer's.
func WriteBlocklist(dir string, reqs []store.OptOutRequest, now time.Time) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# doqscan opt-outs: generated from the optout_requests table at %s.\n", now.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "# Do not edit: changes are overwritten. Permanent exclusions go into another blocklist/*.conf file.\n")
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].CreatedAt.Before(reqs[j].CreatedAt) })
	seen := map[netip.Prefix]bool{}
	for _, r := range reqs {
		if seen[r.Prefix] {
			continue
		}
		seen[r.Prefix] = true
		fmt.Fprintf(&b, "%s # %s opt-out by %s\n", r.Prefix, r.CreatedAt.UTC().Format("2006-01-02"), OneLine(r.Email))
	}
	path := filepath.Join(dir, OptOutFile)
	tmp, err := os.CreateTemp(dir, ".optout-*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

// OneLine replaces the control characters of s (a line break above all) with spaces, so
// that a submitted text stays on one line of a blocklist comment or a table row.
func OneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
