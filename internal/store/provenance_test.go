package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// Every run table keeps the distinct provenance records of the runs that wrote its row:
// the same record again (a resumed run) adds nothing, another build is appended, and a
// run without a record keeps what is there.
func TestRunRowsCarryProvenance(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	v := provenance.Vantage{ID: "vp-prov", Location: "Frankfurt, DE (fra1 rack 3)", Contact: "noc@example.org"}
	if err := s.EnsureVantage(ctx, store.Vantage{ID: v.ID, Location: v.Location, Contact: v.Contact}); err != nil {
		t.Fatal(err)
	}
	// A later run without location or contact keeps them.
	if err := s.EnsureVantage(ctx, store.Vantage{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	var loc, contact string
	if err := s.Pool.QueryRow(ctx, `SELECT location, contact FROM vantage_points WHERE vantage_id = $1`, v.ID).Scan(&loc, &contact); err != nil {
		t.Fatal(err)
	}
	if loc != v.Location || contact != v.Contact {
		t.Fatalf("vantage location/contact = %q/%q, want %q/%q", loc, contact, v.Location, v.Contact)
	}

	a := provenance.New("zprobe", v)
	a.Zmap = &provenance.Zmap{Binary: "/usr/sbin/zmap", Path: "/usr/sbin/zmap", Version: "zmap 2.1.1"}
	a.Probes = []provenance.Probe{provenance.NewProbe("quic-vn", []int{784, 853}, make([]byte, 32))}
	b := a
	b.Build.Revision = "0123456789abcdef0123456789abcdef01234567"
	b.Zmap = &provenance.Zmap{Binary: "zmap", Path: "/usr/local/sbin/zmap", Version: "zmap 4.3.2"}

	starts := []struct {
		table string
		key   string
		start func(rec []byte) (int64, error)
	}{
		{"scans", "scan_id", func(rec []byte) (int64, error) {
			id, _, err := s.StartScan(ctx, store.Scan{ISOWeek: "2026-W47", VantageID: v.ID, Ports: []int32{853}, Provenance: rec})
			return id, err
		}},
		{"verification_runs", "run_id", func(rec []byte) (int64, error) {
			id, _, err := s.StartVerificationRun(ctx, store.VerificationRun{ISOWeek: "2026-W47", VantageID: v.ID, Source: "file", Provenance: rec})
			return id, err
		}},
		{"campaigns", "campaign_id", func(rec []byte) (int64, error) {
			id, _, err := s.StartCampaign(ctx, store.Campaign{VantageID: v.ID, RoundHour: time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC), Provenance: rec})
			return id, err
		}},
	}
	for _, st := range starts {
		t.Run(st.table, func(t *testing.T) {
			read := func(id int64) []provenance.Record {
				t.Helper()
				var raw []byte
				if err := s.Pool.QueryRow(ctx, `SELECT provenance FROM `+st.table+` WHERE `+st.key+` = $1`, id).Scan(&raw); err != nil {
					t.Fatal(err)
				}
				var out []provenance.Record
				if err := json.Unmarshal(raw, &out); err != nil {
					t.Fatalf("%s: %v", raw, err)
				}
				return out
			}
			want := []int{1, 1, 2, 2, 2} // a, a again, b, nil, b again
			for i, rec := range [][]byte{a.JSON(), a.JSON(), b.JSON(), nil, b.JSON()} {
				id, err := st.start(rec)
				if err != nil {
					t.Fatal(err)
				}
				got := read(id)
				if len(got) != want[i] {
					t.Fatalf("start %d: %d provenance records, want %d: %+v", i, len(got), want[i], got)
				}
			}
			id, _ := st.start(nil)
			got := read(id)
			if got[0].Tool != "zprobe" || got[0].Build.Revision != a.Build.Revision || got[1].Build.Revision != b.Build.Revision ||
				got[0].Vantage != v || got[1].Zmap.Version != "zmap 4.3.2" || got[0].Probes[0].SHA256 != a.Probes[0].SHA256 {
				t.Fatalf("stored records differ from those written: %+v", got)
			}
		})
	}
}
