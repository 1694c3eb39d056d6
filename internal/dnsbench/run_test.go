package dnsbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

func targets(s *measuretest.Servers) []dnsbench.Target {
	return []dnsbench.Target{
		{Protocol: measure.DoUDP, Addr: s.UDP},
		{Protocol: measure.DoTCP, Addr: s.TCP},
		{Protocol: measure.DoT, Addr: s.DoT},
		{Protocol: measure.DoH, Variant: measure.VariantGET, Addr: s.DoH},
		{Protocol: measure.DoH, Variant: measure.VariantPOST, Addr: s.DoH},
		{Protocol: measure.DoH3, Variant: measure.VariantPOST, Addr: s.DoH3},
		{Protocol: measure.DoQ, Addr: s.DoQ},
	}
}

var questions = []dnsbench.Question{{Name: "a.example", QType: 1}, {Name: "b.example", QType: 28}}

func TestEveryProtocolAndPolicyAnswers(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", Allow0RTT: true})
	for _, pol := range dnsbench.Policies {
		t.Run(string(pol), func(t *testing.T) {
			ts := targets(s)
			if pol == measure.ModeResumed || pol == measure.Mode0RTT {
				ts = []dnsbench.Target{{Protocol: measure.DoT, Addr: s.DoT}, {Protocol: measure.DoQ, Addr: s.DoQ}}
			}
			c := dnsbench.Config{Targets: ts, Queries: questions, Policy: pol, Workers: 2, Count: 20,
				Timeout: 3 * time.Second, SessionQueries: 7}
			rs, err := dnsbench.Run(context.Background(), c, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != len(ts) {
				t.Fatalf("%d reports for %d targets", len(rs), len(ts))
			}
			for _, r := range rs {
				if r.Sent != 20 || r.Answered != 20 || r.SuccessRate != 1 || r.Statuses[measure.StatusOK] != 20 {
					t.Errorf("%s: sent %d answered %d statuses %v errors %v", r.Target, r.Sent, r.Answered, r.Statuses, r.ErrorSamples)
					continue
				}
				if r.Rcodes["NOERROR"] != 20 || r.Latency.Count != 20 || r.Latency.P50 <= 0 || r.Latency.Max < r.Latency.P99 || r.QPS <= 0 {
					t.Errorf("%s: rcodes %v latency %+v qps %v", r.Target, r.Rcodes, r.Latency, r.QPS)
				}
				// Setting up a session is part of the total, never of the resolve time.
				if r.Total.Mean < r.Latency.Mean {
					t.Errorf("%s: total mean %v < resolve mean %v", r.Target, r.Total.Mean, r.Latency.Mean)
				}
				var sent int64
				for _, sec := range r.Timeline {
					sent += sec.Sent
				}
				if sent != r.Sent {
					t.Errorf("%s: timeline sums to %d of %d", r.Target, sent, r.Sent)
				}
			}
		})
	}
}

func TestFixedRateIsNotExceeded(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3"})
	const rate, dur = 200.0, 1500 * time.Millisecond
	c := dnsbench.Config{Targets: []dnsbench.Target{{Protocol: measure.DoUDP, Addr: s.UDP}, {Protocol: measure.DoQ, Addr: s.DoQ}},
		Queries: questions, Workers: 8, Rate: rate, Duration: dur, Timeout: 2 * time.Second}
	rs, err := dnsbench.Run(context.Background(), c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		// The pacer never runs ahead of the schedule; it may lag (a busy machine).
		max := int64(rate*dur.Seconds()) + 1
		if r.Sent > max || r.Sent < max/2 || r.Load != dnsbench.LoadRate {
			t.Errorf("%s: sent %d at %v/s for %v: want %d..%d", r.Target, r.Sent, rate, dur, max/2, max)
		}
		if r.Answered != r.Sent {
			t.Errorf("%s: answered %d of %d: %v", r.Target, r.Answered, r.Sent, r.ErrorSamples)
		}
	}
}

// Hostile and absent servers give classified outcomes within the deadline.
func TestBadServersAreClassified(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, b := range []hostile.Behaviour{hostile.Stall, hostile.Reset, hostile.Garbage} {
		s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", Behavior: b})
		for _, pol := range []measure.Mode{measure.ModeFresh, measure.ModePersistent} {
			t.Run(string(b)+"/"+string(pol), func(t *testing.T) {
				c := dnsbench.Config{Targets: targets(s), Queries: questions, Policy: pol, Workers: 2, Count: 4, Timeout: timeout}
				rs, err := dnsbench.Run(context.Background(), c, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				// Every query has its outcome (a stalled one: the timeout the code decided);
				// how long the rounds took on the wall clock is no test of the benchmark.
				for _, r := range rs {
					if r.Sent != 4 || r.Answered != 0 || r.Statuses[measure.StatusError] != 0 {
						t.Errorf("%s: sent %d answered %d statuses %v %v", r.Target, r.Sent, r.Answered, r.Statuses, r.ErrorSamples)
					}
					if b == hostile.Stall && r.Statuses[measure.StatusTimeout] != 4 {
						t.Errorf("%s stalled: statuses %v", r.Target, r.Statuses)
					}
				}
			})
		}
	}
	t.Run("unreachable", func(t *testing.T) {
		udp := measuretest.UnusedPort(t, "udp", "127.0.0.3")
		tcp := measuretest.UnusedPort(t, "tcp", "127.0.0.3")
		c := dnsbench.Config{Targets: []dnsbench.Target{{Protocol: measure.DoUDP, Addr: udp}, {Protocol: measure.DoT, Addr: tcp},
			{Protocol: measure.DoQ, Addr: udp}}, Policy: measure.ModePersistent, Workers: 1, Count: 2, Timeout: timeout}
		rs, err := dnsbench.Run(context.Background(), c, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Sent != 2 || r.Answered != 0 || r.Statuses[measure.StatusError] != 0 {
				t.Errorf("%s: sent %d statuses %v %v", r.Target, r.Sent, r.Statuses, r.ErrorSamples)
			}
		}
		if rs[1].Statuses[measure.StatusConnRefused] != 2 {
			t.Errorf("DoT to a closed port: %v", rs[1].Statuses)
		}
	})
}

func TestRampStopsAtLoss(t *testing.T) {
	good := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3"})
	dead := measuretest.Start(t, measuretest.Config{Host: "127.0.0.4", Behavior: hostile.Stall})
	c := dnsbench.Config{Targets: []dnsbench.Target{{Protocol: measure.DoUDP, Addr: good.UDP}, {Protocol: measure.DoUDP, Addr: dead.UDP}},
		Queries: questions, Load: dnsbench.LoadRamp, RampMax: 400, RampLoss: 0.05, Duration: 3 * time.Second,
		Workers: 64, Timeout: 200 * time.Millisecond}
	rs, err := dnsbench.Run(context.Background(), c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, d := rs[0].Ramp, rs[1].Ramp
	if g == nil || d == nil {
		t.Fatal("no ramp results")
	}
	if g.Stopped || g.MaxQPS < 20 || rs[0].SuccessRate != 1 {
		t.Errorf("answering server: %+v success %v", g, rs[0].SuccessRate)
	}
	// A server that answers nothing stops the ramp at the first second it judges: the
	// first with enough queries sent (the timeline's count), whatever the wall clock did.
	first := -1
	for _, s := range rs[1].Timeline {
		if s.Sent >= 20 { // run.go's rampMinSent
			first = s.Second
			break
		}
	}
	if !d.Stopped || d.MaxQPS != 0 || d.StopLoss != 1 || d.StopSecond != first {
		t.Errorf("stalling server: %+v; want stopped at second %d (timeline %+v)", d, first, rs[1].Timeline)
	}
}

func TestInterruptReturnsPromptly(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", Behavior: hostile.Stall})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c := dnsbench.Config{Targets: []dnsbench.Target{{Protocol: measure.DoQ, Addr: s.DoQ}}, Workers: 4,
		Duration: time.Minute, Timeout: 30 * time.Second}
	start := time.Now()
	rs, err := dnsbench.Run(ctx, c, nil, nil)
	if err == nil || len(rs) != 1 {
		t.Fatalf("err %v, %d reports", err, len(rs))
	}
	// Interrupted at 300 ms, the run returns without waiting out its queries' 30 s
	// timeout (the decision the bound tells apart; the wall clock's own figures are
	// BenchmarkVersusDnsperf's).
	if el := time.Since(start); el >= c.Timeout {
		t.Errorf("interrupted run took %v: it waited for the query timeout %v", el, c.Timeout)
	}
}
