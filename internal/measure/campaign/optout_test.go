package campaign_test

import (
	"context"
	"testing"

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
	measureListed(t, s, open, opted)
	if open.Queries() == 0 {
		t.Error("the open resolver got no query: the test proves nothing")
	}
	if n := opted.Queries(); n != 0 {
		t.Errorf("the opted-out resolver got %d queries", n)
	}
	n := scanInts(t, s,
		`SELECT count(*) FROM measurements WHERE address <> '127.0.0.1'`,
		`SELECT count(*) FROM measurements WHERE address = '127.0.0.1'`,
		`SELECT count(*) FROM campaigns WHERE round_hour = '2026-11-22T04:00:00Z' AND vantage_id = 'vp1'`)
	other, mine, rounds := n[0], n[1], n[2]
	if mine == 0 {
		t.Error("no measurement of the open resolver")
	}
	if other != 0 || rounds != 1 {
		t.Errorf("%d measurements of excluded resolvers, %d campaigns at %v (want 0, 1)", other, rounds, hour)
	}
}
