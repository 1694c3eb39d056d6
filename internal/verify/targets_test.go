package verify

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// With several vantage points writing one database, a run verifies the scans of its own
// vantage point and scan label (every shard), latest or of a week, never another's.
func TestResolveScansIsTheVantagePointsOwn(t *testing.T) {
	s := storetest.OpenVantage(t, "vp-a")
	ctx := context.Background()
	if err := s.EnsureVantage(ctx, store.Vantage{ID: "vp-b"}); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	ids := map[string][]int64{}
	// In start order; vp-b's W48 weekly scan is the newest of all.
	for i, sc := range []struct {
		week, vantage, label string
		shard, shards        int
	}{
		{"2026-W47", "vp-a", "weekly", 0, 2}, {"2026-W47", "vp-a", "weekly", 1, 2},
		{"2026-W48", "vp-a", "extra", 0, 1},
		{"2026-W47", "vp-b", "weekly", 0, 1}, {"2026-W48", "vp-b", "weekly", 0, 1},
	} {
		id, _, err := s.StartScan(ctx, store.Scan{ISOWeek: sc.week, VantageID: sc.vantage, Label: sc.label,
			Shard: sc.shard, Shards: sc.shards, Ports: []int32{784}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool.Exec(ctx, `UPDATE scans SET started_at = $2 WHERE scan_id = $1`, id,
			base.Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatal(err)
		}
		k := sc.week + "/" + sc.vantage + "/" + sc.label
		ids[k] = append(ids[k], id)
		if sc.label == "weekly" {
			ids[sc.week+"/any/weekly"] = append(ids[sc.week+"/any/weekly"], id)
		}
	}
	for _, tc := range []struct {
		sel  ScanSelection
		want string
	}{
		{ScanSelection{Vantage: "vp-a"}, "2026-W47/vp-a/weekly"},
		{ScanSelection{Vantage: "vp-a", Week: "2026-W47"}, "2026-W47/vp-a/weekly"},
		{ScanSelection{Vantage: "vp-a", Label: "extra"}, "2026-W48/vp-a/extra"},
		{ScanSelection{Vantage: "vp-b"}, "2026-W48/vp-b/weekly"},
		{ScanSelection{Vantage: "vp-b", Week: "2026-W47"}, "2026-W47/vp-b/weekly"},
		{ScanSelection{Vantage: AnyVantage, Week: "2026-W47"}, "2026-W47/any/weekly"},
		{ScanSelection{Vantage: AnyVantage}, "2026-W48/vp-b/weekly"},
	} {
		got, week, err := ResolveScans(ctx, s, tc.sel)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(ids[tc.want]) || week+"/" != tc.want[:9] {
			t.Errorf("ResolveScans(%+v) = %v %s %v; want %v (%s)", tc.sel, got, week, err, ids[tc.want], tc.want)
		}
	}
	if got, _, err := ResolveScans(ctx, s, ScanSelection{Vantage: "vp-a", Week: "2026-W49"}); err == nil {
		t.Errorf("a week without scans gave %v", got)
	}
}
