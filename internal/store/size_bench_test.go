package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// BenchmarkBytesPerMeasurement (-benchtime 1x) prints the bytes a stored measurement
// takes with its share of RTT samples, qlogs and handshake analyses, measured on real
// rows: the campaign with the most qlogs in DOQSCAN_BENCH_SOURCE (a database a round was
// measured into, e.g. the demo's: DOQSCAN_BENCH_SOURCE="$(bin/dbctl url)") is copied
// DOQSCAN_BENCH_COPIES times (default 100, new campaigns an hour apart, ids derived as
// measure derives them) into a fresh database, which is then vacuumed and measured
// (heap, TOAST and indexes of every partition). It prints the projection for a year of
// hourly rounds of 1,200 resolvers from one and from six vantage points. Skipped without
// a source.
func BenchmarkBytesPerMeasurement(b *testing.B) {
	src := os.Getenv("DOQSCAN_BENCH_SOURCE")
	if src == "" {
		b.Skip("SKIP: set DOQSCAN_BENCH_SOURCE to a database with a measured round (e.g. the demo's)")
	}
	copies := 100
	if v := os.Getenv("DOQSCAN_BENCH_COPIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("DOQSCAN_BENCH_COPIES=%q", v)
		}
		copies = n
	}
	ctx := context.Background()
	from, err := store.Open(ctx, src)
	if err != nil {
		b.Fatal(err)
	}
	defer from.Close()
	var cid int64
	if err := from.Pool.QueryRow(ctx, `SELECT campaign_id FROM qlogs GROUP BY 1 ORDER BY count(*) DESC, 1 DESC LIMIT 1`).Scan(&cid); err != nil {
		b.Fatalf("no campaign with qlogs in the source: %v", err)
	}
	ms, err := store.Select[store.Measurement](ctx, from, `SELECT * FROM measurements WHERE campaign_id = $1`, cid)
	if err != nil {
		b.Fatal(err)
	}
	qs, err := store.Select[store.Qlog](ctx, from, `SELECT * FROM qlogs WHERE campaign_id = $1`, cid)
	if err != nil {
		b.Fatal(err)
	}
	rs, err := store.Select[store.RTTSample](ctx, from, `SELECT * FROM rtt_samples WHERE campaign_id = $1`, cid)
	if err != nil {
		b.Fatal(err)
	}
	as, err := store.Select[store.HandshakeAnalysis](ctx, from, `SELECT a.* FROM handshake_analyses a
		JOIN measurements m USING (measurement_id, round_hour) WHERE m.campaign_id = $1`, cid)
	if err != nil {
		b.Fatal(err)
	}
	var resolvers int
	if err := from.Pool.QueryRow(ctx, `SELECT count(DISTINCT address) FROM measurements WHERE campaign_id = $1`, cid).Scan(&resolvers); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("source campaign %d: %d resolvers, %d measurements, %d RTT samples, %d qlogs, %d analyses\n",
		cid, resolvers, len(ms), len(rs), len(qs), len(as))

	to := storetest.OpenVantage(b, "size")
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	b.ResetTimer()
	for c := 0; c < copies; c++ {
		hour := start.Add(time.Duration(c) * time.Hour)
		ncid, _, err := to.StartCampaign(ctx, store.Campaign{VantageID: "size", RoundHour: hour})
		if err != nil {
			b.Fatal(err)
		}
		newID := map[[16]byte][16]byte{}
		newQ := map[[16]byte][16]byte{}
		mm := make([]store.Measurement, len(ms))
		for i, m := range ms {
			k := store.MeasurementKey{CampaignID: ncid, Address: m.Address, Protocol: m.Protocol, Port: m.Port,
				Variant: m.Variant, Mode: m.Mode, KeyShare: m.KeyShare, Phase: m.Phase, Seq: m.Seq}
			newID[m.MeasurementID] = k.ID()
			m.MeasurementID, m.CampaignID, m.RoundHour = k.ID(), ncid, hour
			if m.QlogID != nil {
				k.Seq = 0
				q := k.QlogID()
				newQ[*m.QlogID] = q
				m.QlogID = &q
			}
			mm[i] = m
		}
		qq := make([]store.Qlog, 0, len(qs))
		for _, q := range qs {
			if id, ok := newQ[q.QlogID]; ok {
				q.QlogID, q.CampaignID, q.RoundHour = id, ncid, hour
				qq = append(qq, q)
			}
		}
		rr := make([]store.RTTSample, len(rs))
		for i, r := range rs {
			r.CampaignID, r.RoundHour = ncid, hour
			rr[i] = r
		}
		aa := make([]store.HandshakeAnalysis, len(as))
		for i, a := range as {
			a.MeasurementID, a.RoundHour = newID[a.MeasurementID], hour
			aa[i] = a
		}
		for _, ins := range []func() error{
			func() error { _, err := store.Insert(ctx, to, store.TableQlogs, qq); return err },
			func() error { _, err := store.Insert(ctx, to, store.TableMeasurements, mm); return err },
			func() error { _, err := store.Insert(ctx, to, store.TableRTTSamples, rr); return err },
			func() error { _, err := store.Insert(ctx, to, store.TableHandshakeAnalyses, aa); return err },
		} {
			if err := ins(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	for _, t := range []string{"measurements", "qlogs", "rtt_samples", "handshake_analyses"} {
		if _, err := to.Pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			b.Fatal(err)
		}
	}
	var nMeas int64
	if err := to.Pool.QueryRow(ctx, `SELECT count(*) FROM measurements`).Scan(&nMeas); err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, t := range []string{"measurements", "qlogs", "rtt_samples", "handshake_analyses"} {
		var bytes, rows int64
		if err := to.Pool.QueryRow(ctx, `SELECT (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree($1::regclass)),
			(SELECT count(*) FROM `+t+`)`, t).Scan(&bytes, &rows); err != nil {
			b.Fatal(err)
		}
		per := float64(bytes) / float64(nMeas)
		total += per
		fmt.Printf("%-19s %9d rows %8.1f MB  %7.1f bytes/row  %7.1f bytes per measurement\n", t, rows, float64(bytes)/1e6,
			float64(bytes)/float64(max(rows, 1)), per)
	}
	perResolver := float64(nMeas) / float64(copies*resolvers)
	perYear := perResolver * 1200 * 24 * 365 // measurements a year, one vantage point, 1,200 resolvers hourly
	fmt.Printf("total %.0f bytes per stored measurement (%.1f measurements per resolver and round)\n", total, perResolver)
	fmt.Printf("projection, 1,200 resolvers hourly: %.0f M measurements and %.1f GB a month per vantage point; a year: %.0f GB for one, %.2f TB for six\n",
		perYear/12/1e6, perYear/12*total/1e9, perYear*total/1e9, 6*perYear*total/1e12)
}
