package dnsbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// TestLongStreams: one persistent DoTCP and DoT session carries 300 queries against the
// loopback servers, every one answered (a server that closed its streams after 128
// queries, miekg's default, failed the 129th and made dnsperf wait out its pipelined
// queries in the comparison benchmark).
func TestLongStreams(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.6"})
	for _, a := range []string{"dotcp://" + s.TCP.String(), "dot://" + s.DoT.String()} {
		tg, err := dnsbench.ParseTarget(a)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rs, err := dnsbench.Run(ctx, dnsbench.Config{Targets: []dnsbench.Target{tg}, Workers: 1, Count: 300,
			SessionQueries: 1000, Timeout: 5 * time.Second}, nil, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if r := rs[0]; r.Sent != 300 || r.Answered != 300 {
			t.Errorf("%s: %d sent, %d answered, want 300 each (%v %v)", a, r.Sent, r.Answered, r.Statuses, r.ErrorSamples)
		}
	}
}
