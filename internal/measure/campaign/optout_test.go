package campaign_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestRoundNeverContactsOptedOut: a resolver inside an accepted opt-out gets no query
// and no row; the round measures the others, and its hour comes from the caller.
func TestRoundNeverContactsOptedOut(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	open := measuretest.Start(t, measuretest.Config{Host: "127.0.0.1"})
	opted := measuretest.Start(t, measuretest.Config{Host: "127.0.74.1"})
	if _, err := s.Pool.Exec(ctx, `INSERT INTO optout_requests (prefix, email) VALUES ('127.0.74.0/24', 'noc@example.net')`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "targets.txt")
	line := func(sv *measuretest.Servers) string {
		return fmt.Sprintf("%s doudp=%d dotcp=%d\n", sv.UDP.Addr(), sv.UDP.Port(), sv.TCP.Port())
	}
	if err := os.WriteFile(file, []byte(line(open)+line(opted)), 0o644); err != nil {
		t.Fatal(err)
	}
	o := campaign.Options{TargetsFile: file, Protocols: "doudp,dotcp", Modes: "fresh", KeyShares: "x25519", Variants: "GET", DBDeadline: campaign.DefaultDBDeadline}
	o.VantageID, o.Hour, o.Name, o.RTTSamples, o.Concurrency, o.Timeout, o.Persistent = "vp1", hour, "test.com", 1, 4, 2*time.Second, 5
	if err := o.Parse(); err != nil {
		t.Fatal(err)
	}
	if err := campaign.Rounds(ctx, s, o, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if open.Queries() == 0 {
		t.Error("the open resolver got no query: the test proves nothing")
	}
	if n := opted.Queries(); n != 0 {
		t.Errorf("the opted-out resolver got %d queries", n)
	}
	var other, rounds int
	var mine int
	for _, q := range []struct {
		n   *int
		sql string
	}{
		{&other, `SELECT count(*) FROM measurements WHERE address <> '127.0.0.1'`},
		{&mine, `SELECT count(*) FROM measurements WHERE address = '127.0.0.1'`},
		{&rounds, `SELECT count(*) FROM campaigns WHERE round_hour = '2026-11-22T04:00:00Z' AND vantage_id = 'vp1'`},
	} {
		if err := s.Pool.QueryRow(ctx, q.sql).Scan(q.n); err != nil {
			t.Fatal(err)
		}
	}
	if mine == 0 {
		t.Error("no measurement of the open resolver")
	}
	if other != 0 || rounds != 1 {
		t.Errorf("%d measurements of excluded resolvers, %d campaigns at %v (want 0, 1)", other, rounds, hour)
	}
}
