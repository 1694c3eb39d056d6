package dnsbench_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// With --streams N one persistent worker has N queries outstanding at once on every
// protocol: the servers hold every answer until N queries wait for one, so a worker
// with fewer outstanding would get none (the control below).
func TestStreamsKeepQueriesOutstanding(t *testing.T) {
	const n = 4
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", Hold: n})
	for _, tg := range targets(s) {
		t.Run(tg.String(), func(t *testing.T) {
			c := dnsbench.Config{Targets: []dnsbench.Target{tg}, Queries: questions, Policy: measure.ModePersistent,
				Workers: 1, Streams: n, Count: 3 * n, SessionQueries: 100, Timeout: 10 * time.Second}
			rs, err := dnsbench.Run(context.Background(), c, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			if r.Sent != 3*n || r.Answered != 3*n || r.Rcodes["NOERROR"] != 3*n || r.Streams != n {
				t.Errorf("sent %d answered %d rcodes %v streams %d: %v %v", r.Sent, r.Answered, r.Rcodes, r.Streams, r.Statuses, r.ErrorSamples)
			}
		})
	}
	t.Run("control: one stream gets no answer", func(t *testing.T) {
		s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.4", Hold: n})
		c := dnsbench.Config{Targets: []dnsbench.Target{{Protocol: measure.DoQ, Addr: s.DoQ}}, Queries: questions,
			Workers: 1, Count: n - 1, Timeout: 200 * time.Millisecond}
		rs, err := dnsbench.Run(context.Background(), c, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := rs[0]; r.Sent != n-1 || r.Answered != 0 || r.Statuses[measure.StatusTimeout] != n-1 {
			t.Errorf("one stream: sent %d answered %d %v", r.Sent, r.Answered, r.Statuses)
		}
	})
}

// A server that stalls with several streams outstanding: every query times out on its
// own, none is lost, and the worker goes on with new sessions.
func TestStreamsStallAndReset(t *testing.T) {
	for _, b := range []hostile.Behaviour{hostile.Stall, hostile.Reset} {
		s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", Behavior: b})
		t.Run(string(b), func(t *testing.T) {
			c := dnsbench.Config{Targets: targets(s), Queries: questions, Policy: measure.ModePersistent,
				Workers: 2, Streams: 3, Count: 12, Timeout: 300 * time.Millisecond}
			rs, err := dnsbench.Run(context.Background(), c, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				checkUnanswered(t, r, 12)
				if b == hostile.Stall && r.Statuses[measure.StatusTimeout] != 12 {
					t.Errorf("%s stalled: %v", r.Target, r.Statuses)
				}
			}
		})
	}
}

// checkUnanswered fails the test unless r sent n queries and holds n outcomes, none
// answered and none an error: each query timed out or failed in a classified way.
func checkUnanswered(t *testing.T, r *dnsbench.Report, n int64) {
	t.Helper()
	var done int64
	for _, k := range r.Statuses {
		done += k
	}
	if r.Sent != n || done != n || r.Answered != 0 || r.Statuses[measure.StatusError] != 0 {
		t.Errorf("%s: sent %d outcomes %d answered %d %v %v", r.Target, r.Sent, done, r.Answered, r.Statuses, r.ErrorSamples)
	}
}

// An unreachable resolver with several streams: classified outcomes, none lost.
func TestStreamsUnreachable(t *testing.T) {
	udp := measuretest.UnusedPort(t, "udp", "127.0.0.3")
	tcp := measuretest.UnusedPort(t, "tcp", "127.0.0.3")
	c := dnsbench.Config{Targets: []dnsbench.Target{{Protocol: measure.DoUDP, Addr: udp}, {Protocol: measure.DoTCP, Addr: tcp},
		{Protocol: measure.DoQ, Addr: udp}}, Policy: measure.ModePersistent, Workers: 2, Streams: 3, Count: 6, Timeout: 300 * time.Millisecond}
	rs, err := dnsbench.Run(context.Background(), c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		checkUnanswered(t, r, 6)
	}
	if rs[0].Statuses[measure.StatusConnRefused] == 0 || rs[1].Statuses[measure.StatusConnRefused] != 6 {
		t.Errorf("closed ports: DoUDP %v, DoTCP %v", rs[0].Statuses, rs[1].Statuses)
	}
}

func TestStreamsNeedPersistent(t *testing.T) {
	tg := []dnsbench.Target{{Protocol: measure.DoQ, Addr: measuretest.UnusedPort(t, "udp", "127.0.0.3")}}
	for _, c := range []dnsbench.Config{
		{Targets: tg, Policy: measure.ModeFresh, Streams: 2, Count: 1},
		{Targets: tg, Policy: measure.Mode0RTT, Streams: 8, Count: 1},
		{Targets: tg, Streams: -1, Count: 1},
		{Targets: tg, Streams: 101, Count: 1},
		{Targets: tg, Streams: 10, SessionQueries: 5, Count: 1},
	} {
		if err := c.Validate(); !errors.Is(err, dnsbench.ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// BenchmarkStreamsDoQ prints the QPS of one DoQ worker with 1 and 8 streams against a
// server that answers after 2 ms (a known service time): with one stream a worker waits
// for each answer, with 8 it keeps the server busy.
func BenchmarkStreamsDoQ(b *testing.B) {
	s := measuretest.Start(b, measuretest.Config{Host: "127.0.0.3", Delay: 2 * time.Millisecond})
	qps := map[int]float64{}
	for _, n := range []int{1, 8} {
		c := dnsbench.Config{Targets: []dnsbench.Target{{Protocol: measure.DoQ, Addr: s.DoQ}}, Queries: questions,
			Workers: 1, Streams: n, Count: 400, Timeout: 5 * time.Second}
		var sum float64
		for range b.N {
			rs, err := dnsbench.Run(context.Background(), c, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			if rs[0].Answered != 400 {
				b.Fatalf("streams %d: answered %d: %v", n, rs[0].Answered, rs[0].ErrorSamples)
			}
			sum += rs[0].QPS
		}
		qps[n] = sum / float64(b.N)
		b.Logf("DoQ, one worker, 2 ms service time: streams=%d %.0f queries/s", n, qps[n])
	}
	b.ReportMetric(qps[1], "qps_streams1")
	b.ReportMetric(qps[8], "qps_streams8")
	b.ReportMetric(qps[8]/qps[1], "speedup")
}

// The command end to end: targets and a query file from standard input, --streams, the
// JSON report.
func TestCommandWithStreams(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", Hold: 4})
	var out bytes.Buffer
	o := dnsbench.Options{Config: dnsbench.Config{Workers: 1, Streams: 4, Count: 8, Timeout: 10 * time.Second},
		Args: []string{"doq://" + s.DoQ.String(), "dot://" + s.DoT.String()}, QueriesFile: "-",
		Stdin: strings.NewReader("; comment\na.example A\nb.example AAAA\n"), JSON: true, Out: &out}
	if err := dnsbench.Command(context.Background(), o, nil); err != nil {
		t.Fatal(err)
	}
	rs, err := dnsbench.ReadJSON(&out)
	if err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rs) != 2 {
		t.Fatalf("%d reports", len(rs))
	}
	for _, r := range rs {
		if r.Streams != 4 || r.Policy != "persistent" || r.Answered != 8 || r.Rcodes["NOERROR"] != 8 {
			t.Errorf("%s: streams %d policy %s answered %d %v", r.Target, r.Streams, r.Policy, r.Answered, r.ErrorSamples)
		}
	}
}
