package campaign_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// TestPanickingResolverRecordedAsError: a panic while one resolver is measured (here in
// the OnResult hook, on that resolver's goroutine, after its first DoTCP exchange) does
// not end the round: the resolver's rows made before the panic are kept, its other
// exchanges are stored with status error, the stack is in the log, and the other
// resolvers are measured as usual.
func TestPanickingResolverRecordedAsError(t *testing.T) {
	s := storetest.OpenVantage(t, "test")
	ctx := context.Background()
	hosts := []string{"127.0.0.41", "127.0.0.42", "127.0.0.43"}
	var targets []campaign.Target
	for _, h := range hosts {
		sv := measuretest.Start(t, measuretest.Config{Host: h})
		targets = append(targets, campaign.Target{Addr: netip.MustParseAddr(h), Endpoints: []campaign.Endpoint{
			{Protocol: measure.DoUDP, Port: sv.UDP.Port()}, {Protocol: measure.DoTCP, Port: sv.TCP.Port()}}})
	}
	bad := targets[1].Addr
	var logs testsupport.SyncBuffer
	cfg := campaign.Config{VantageID: "test", Hour: hour, Timeout: 2 * time.Second, Concurrency: 2, BatchSize: 1,
		RTTSamples: 1, RTTTimeout: 300 * time.Millisecond,
		OnResult: func(tg campaign.Target, ep campaign.Endpoint, phase string, _ *measure.Result) {
			if tg.Addr == bad && ep.Protocol == measure.DoTCP && phase == campaign.PhaseWarmup {
				var m map[string]int
				m["boom"]++ //nolint:staticcheck // SA5000: the nil-map write is the panic under test; a runtime panic, as a bug in a protocol client would raise
			}
		}}
	sum, err := campaign.Run(ctx, s, cfg, targets, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Measured != len(targets) {
		t.Errorf("measured %d resolvers, want %d", sum.Measured, len(targets))
	}
	if n := sum.Status[string(measure.DoTCP)][string(measure.StatusError)]; n != 1 {
		t.Errorf("summary: %d DoTCP exchanges with status error, want 1 (%v)", n, sum.Status)
	}
	rows, err := s.Pool.Query(ctx, `SELECT protocol, phase, status, error FROM measurements WHERE address = $1`, bad)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{} // protocol/phase -> status (error text)
	for rows.Next() {
		var protocol, phase, status, errText string
		if err := rows.Scan(&protocol, &phase, &status, &errText); err != nil {
			t.Fatal(err)
		}
		got[protocol+"/"+phase] = status
		if status == "error" && !strings.HasPrefix(errText, "panic: ") {
			t.Errorf("%s/%s: error %q, want the panic", protocol, phase, errText)
		}
	}
	rows.Close()
	// DoUDP warm-up and measured (before the panic); DoTCP measured as error (the panic
	// came as the DoTCP warm-up's result was handed over).
	want := map[string]string{"doudp/warmup": "ok", "doudp/measured": "ok", "dotcp/measured": "error"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rows of the panicking resolver: %v, want %v", got, want)
	}
	var others int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM measurements WHERE address <> $1 AND status = 'ok'`, bad).Scan(&others); err != nil {
		t.Fatal(err)
	}
	if others != 2*2*(len(targets)-1) {
		t.Errorf("%d ok rows of the other resolvers, want %d", others, 2*2*(len(targets)-1))
	}
	if l := logs.String(); !strings.Contains(l, "panicked") || !strings.Contains(l, "assignment to entry in nil map") || !strings.Contains(l, "goroutine") {
		t.Errorf("log lacks the panic and its stack:\n%s", l)
	}
}
