package conncheck

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestWriteStoresTokenAges: the token ages reach connection_policies in milliseconds, and
// an age not found stays NULL (an unknown is never 0).
func TestWriteStoresTokenAges(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	if err := s.EnsureVantage(ctx, store.Vantage{ID: "vp-test"}); err != nil {
		t.Fatal(err)
	}
	var runID int64
	if err := s.Pool.QueryRow(ctx, `INSERT INTO policy_runs (iso_week, vantage_id, source) VALUES ('2026-W48', 'vp-test', 'file')
		RETURNING run_id`).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	ep := func(last byte) Endpoint {
		return Endpoint{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 0, last}), 853), Protocol: measure.DoQ}
	}
	ps := []Policy{
		{Endpoint: ep(1), Status: measure.StatusOK, TokenHonouredFor: d(10 * time.Second), TokenRefusedAfter: d(40 * time.Second), Detail: map[string]any{}},
		{Endpoint: ep(2), Status: measure.StatusOK, TokenHonouredFor: d(40 * time.Second), Detail: map[string]any{}},
		{Endpoint: ep(3), Status: measure.StatusOK, TokenRefusedAfter: d(0), Detail: map[string]any{}},
		{Endpoint: ep(4), Status: measure.StatusOK, Detail: map[string]any{}},
	}
	for i := range ps {
		ps[i].At = time.Now()
	}
	if err := write(ctx, s, runID, ps); err != nil {
		t.Fatal(err)
	}
	got := storetest.QueryMap[string, string](t, s, `SELECT host(address), concat_ws('/', coalesce(token_honoured_for_ms::text, 'NULL'),
		coalesce(token_refused_after_ms::text, 'NULL')) FROM connection_policies WHERE run_id = $1`, runID)
	want := map[string]string{"198.18.0.1": "10000/40000", "198.18.0.2": "40000/NULL", "198.18.0.3": "NULL/0", "198.18.0.4": "NULL/NULL"}
	for a, w := range want {
		if got[a] != w {
			t.Errorf("%s: token honoured for / refused after (ms) %q, want %q", a, got[a], w)
		}
	}
}
