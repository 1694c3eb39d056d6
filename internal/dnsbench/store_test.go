package dnsbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

func TestSaveIsIdempotent(t *testing.T) {
	s := storetest.Open(t)
	srv := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3"})
	c := dnsbench.Config{Targets: []dnsbench.Target{{Protocol: measure.DoQ, Addr: srv.DoQ}}, Workers: 2,
		Rate: 100, Duration: 1200 * time.Millisecond, Timeout: time.Second, Label: "test"}
	rs, err := dnsbench.Run(context.Background(), c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := dnsbench.Save(ctx, s, rs[0])
	if err != nil {
		t.Fatal(err)
	}
	id2, err := dnsbench.Save(ctx, s, rs[0])
	if err != nil || id2 != id {
		t.Fatalf("second save: id %d (first %d), %v", id2, id, err)
	}
	var runs, samples, sent int64
	var qps float64
	if err := s.Pool.QueryRow(ctx, `SELECT count(*), max(qps), max(sent) FROM bench_runs`).Scan(&runs, &qps, &sent); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM bench_samples WHERE bench_id = $1`, id).Scan(&samples); err != nil {
		t.Fatal(err)
	}
	if runs != 1 || samples != int64(len(rs[0].Timeline)) || samples < 2 || qps != rs[0].QPS || sent != rs[0].Sent {
		t.Fatalf("runs %d samples %d (timeline %d) qps %v sent %d; report qps %v sent %d",
			runs, samples, len(rs[0].Timeline), qps, sent, rs[0].QPS, rs[0].Sent)
	}
}
