package dnsbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/doqscan/doqscan/internal/store"
)

// Sample is a bench_samples row.
type Sample struct {
	BenchID  int64   `db:"bench_id"`
	Second   int32   `db:"second"`
	Rate     float64 `db:"rate"`
	Sent     int64   `db:"sent"`
	Answered int64   `db:"answered"`
	Failed   int64   `db:"failed"`
	MeanMs   float64 `db:"mean_ms"`
	P99Ms    float64 `db:"p99_ms"`
	// StartedAt is the run's start (bench_runs.started_at): the partition key.
	StartedAt time.Time `db:"started_at"`
}

func newRunKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Save stores r (bench_runs) and its timeline (bench_samples) in one transaction and
// returns its bench_id; saving the same report again adds nothing.
func Save(ctx context.Context, s *store.Store, r *Report) (int64, error) {
	ap, err := netip.ParseAddrPort(r.Address)
	if err != nil {
		return 0, fmt.Errorf("store bench run: address %q: %w", r.Address, err)
	}
	js, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("store bench run: %w", err)
	}
	var rampQPS *float64
	if r.Ramp != nil {
		rampQPS = &r.Ramp.MaxQPS
	}
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("store bench run: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op; on an earlier error that error is returned
	var id int64
	var started time.Time
	err = tx.QueryRow(ctx, `INSERT INTO bench_runs (run_key, started_at, label, protocol, variant, address, port,
		policy, load, workers, rate, elapsed_s, sent, answered, qps, success_rate, latency_mean_ms,
		latency_p50_ms, latency_p99_ms, total_mean_ms, ramp_max_qps, report)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22)
		ON CONFLICT (run_key) DO UPDATE SET run_key = EXCLUDED.run_key
		RETURNING bench_id, started_at`,
		r.RunKey, r.Started, r.Label, r.Protocol, r.Variant, ap.Addr(), int32(ap.Port()), r.Policy, r.Load,
		r.Workers, r.Rate, r.Elapsed, r.Sent, r.Answered, r.QPS, r.SuccessRate, r.Latency.Mean,
		r.Latency.P50, r.Latency.P99, r.Total.Mean, rampQPS, js).Scan(&id, &started)
	if err != nil {
		return 0, fmt.Errorf("store bench run: %w", err)
	}
	rows := make([]Sample, len(r.Timeline))
	for i, sec := range r.Timeline {
		rows[i] = Sample{BenchID: id, Second: int32(sec.Second), Rate: sec.Rate, Sent: sec.Sent,
			Answered: sec.Answered, Failed: sec.Failed, MeanMs: sec.MeanMs, P99Ms: sec.P99Ms, StartedAt: started}
	}
	if _, err := store.InsertTx(ctx, tx, "bench_samples", rows); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("store bench run: commit: %w", err)
	}
	return id, nil
}
