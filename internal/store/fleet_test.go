package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

func randomID(prefix string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// pgCode is the SQLSTATE of err ("" if it is not a server error).
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// A vantage point's role on a central database writes and reads its own vantage
// point's rows only, cannot read who asked to opt out, and cannot alter the schema;
// what it may do (open the store, start a round in a month without partitions yet,
// COPY its rows, build the blocklist) works.
func TestVantageRoleIsConfinedToItsOwnRows(t *testing.T) {
	admin, dbURL := storetest.OpenURL(t)
	ctx := context.Background()
	a, b := randomID("fa"), randomID("fb")
	urlA := storetest.VantageRole(t, admin, dbURL, a)
	if err := admin.EnsureVantage(ctx, store.Vantage{ID: b}); err != nil {
		t.Fatal(err)
	}
	hour := time.Date(2027, 3, 4, 5, 0, 0, 0, time.UTC) // a month no partition exists for yet
	bCampaign, _, err := admin.StartCampaign(ctx, store.Campaign{VantageID: b, RoundHour: hour})
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr("198.19.1.2")
	row := func(cid int64) store.Measurement {
		k := store.MeasurementKey{CampaignID: cid, Address: addr, Protocol: "doudp", Port: 53, Mode: "fresh", Phase: "measured"}
		return store.Measurement{MeasurementID: k.ID(), CampaignID: cid, Address: addr, Protocol: "doudp", Port: 53,
			Mode: "fresh", Phase: "measured", StartedAt: hour, Status: "ok", RoundHour: hour}
	}
	if _, err := store.Insert(ctx, admin, store.TableMeasurements, []store.Measurement{row(bCampaign)}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Pool.Exec(ctx, `INSERT INTO optout_requests (prefix, email, note) VALUES ('198.19.9.0/24', 'noc@example.net', 'x')`); err != nil {
		t.Fatal(err)
	}

	va, err := store.Open(ctx, urlA)
	if err != nil {
		t.Fatalf("vantage role opens the store: %v", err)
	}
	defer va.Close()
	// Its own round: campaign, rows, read back.
	aCampaign, _, err := va.StartCampaign(ctx, store.Campaign{VantageID: a, RoundHour: hour.Add(time.Hour)})
	if err != nil {
		t.Fatalf("vantage role starts its own round: %v", err)
	}
	own := row(aCampaign)
	own.RoundHour = hour.Add(time.Hour)
	if n, err := store.Insert(ctx, va, store.TableMeasurements, []store.Measurement{own}); err != nil || n != 1 {
		t.Fatalf("vantage role stores its own measurement: %d, %v", n, err)
	}
	var seen int
	if err := va.Pool.QueryRow(ctx, `SELECT count(*) FROM measurements`).Scan(&seen); err != nil || seen != 1 {
		t.Errorf("vantage role sees %d measurements (%v), want its own 1", seen, err)
	}
	if err := va.Pool.QueryRow(ctx, `SELECT count(*) FROM campaigns`).Scan(&seen); err != nil || seen != 1 {
		t.Errorf("vantage role sees %d campaigns (%v), want its own 1", seen, err)
	}

	// Another vantage point's rows: refused.
	if _, _, err := va.StartCampaign(ctx, store.Campaign{VantageID: b, RoundHour: hour.Add(2 * time.Hour)}); pgCode(err) != "42501" {
		t.Errorf("vantage role starting another vantage point's campaign: %v, want an RLS refusal (42501)", err)
	}
	other := row(bCampaign)
	other.Port = 5353
	other.MeasurementID = [16]byte{9}
	if _, err := store.Insert(ctx, va, store.TableMeasurements, []store.Measurement{other}); pgCode(err) != "23503" {
		t.Errorf("vantage role writing into another vantage point's campaign: %v, want a missing-parent refusal (23503)", err)
	}
	if _, err := va.Pool.Exec(ctx, `UPDATE campaigns SET status = 'failed' WHERE campaign_id = $1`, bCampaign); err != nil {
		t.Fatal(err)
	}
	var st string
	if err := admin.Pool.QueryRow(ctx, `SELECT status FROM campaigns WHERE campaign_id = $1`, bCampaign).Scan(&st); err != nil || st != "running" {
		t.Errorf("another vantage point's campaign is %q after the vantage role's UPDATE, want it untouched", st)
	}
	if _, err := va.Pool.Exec(ctx, `DELETE FROM measurements`); pgCode(err) != "42501" {
		t.Errorf("vantage role DELETE: %v, want permission denied", err)
	}

	// Opt-outs: the prefixes, never who asked.
	if _, err := va.Pool.Exec(ctx, `SELECT email FROM optout_requests`); pgCode(err) != "42501" {
		t.Errorf("vantage role reading opt-out emails: %v, want permission denied", err)
	}
	if _, err := va.Pool.Exec(ctx, `SELECT * FROM optout_requests`); pgCode(err) != "42501" {
		t.Errorf("vantage role reading opt-out rows whole: %v, want permission denied", err)
	}
	entries, err := blocklist.OptOuts(ctx, va)
	if err != nil || len(entries) != 1 || entries[0].Prefix.String() != "198.19.9.0/24" {
		t.Errorf("vantage role's blocklist: %+v, %v", entries, err)
	}

	// The schema.
	for _, q := range []string{`ALTER TABLE measurements ADD COLUMN x integer`, `CREATE TABLE x (i integer)`,
		`DROP TABLE scans`, `SELECT doqscan_grant_vantage('` + "vp_" + a + `')`} {
		if _, err := va.Pool.Exec(ctx, q); pgCode(err) != "42501" {
			t.Errorf("vantage role: %s: %v, want permission denied", q, err)
		}
	}
}
