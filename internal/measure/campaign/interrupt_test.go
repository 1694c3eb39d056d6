package campaign_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestStopMidResolverStoresNoneOfIt: a round stopped while a resolver's last RTT probe
// runs (the probe follows the resolver's last exchange, DoTCP here) keeps none of that
// resolver's rows; the resumed round measures it again and stores exactly what an
// uninterrupted round stores, RTT samples and their status included. The stop comes
// from the OnResult hook of the resolver's last measured exchange, so the probe always
// runs with the round's context already done.
func TestStopMidResolverStoresNoneOfIt(t *testing.T) {
	s := storetest.OpenVantage(t, "test")
	ctx := context.Background()
	hosts := []string{"127.0.0.30", "127.0.0.31"}
	var targets []campaign.Target
	for _, tg := range targetsFor(t, hosts, measuretest.Config{}) {
		// DoQ, DoUDP, then DoTCP: the TCP probe ends the resolver.
		e := tg.Endpoints
		tg.Endpoints = []campaign.Endpoint{e[4], e[0], e[1]}
		targets = append(targets, tg)
	}
	cfg := campaign.Config{VantageID: "test", Hour: hour, Timeout: 2 * time.Second, Concurrency: 1, BatchSize: 1,
		Protocols: []measure.Protocol{measure.DoQ, measure.DoUDP, measure.DoTCP}, RTTSamples: 3, RTTTimeout: time.Second}

	ref := cfg
	ref.Label = "whole"
	if _, err := campaign.Run(ctx, s, ref, targets, logger()); err != nil {
		t.Fatal(err)
	}

	// Stopped after the second resolver's DoTCP exchange: the first resolver is stored,
	// the second is measured up to its TCP probe, which then runs on a done context.
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	cut := cfg
	cut.Label = "cut"
	var once sync.Once
	cut.OnResult = func(tg campaign.Target, ep campaign.Endpoint, phase string, _ *measure.Result) {
		if tg.Addr == netip.MustParseAddr(hosts[1]) && ep.Protocol == measure.DoTCP && phase == campaign.PhaseMeasured {
			once.Do(stop)
		}
	}
	part, err := campaign.Run(cctx, s, cut, targets, logger())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped round returned %v, want context.Canceled", err)
	}
	for table, keys := range storetest.CampaignKeys(t, s, "cut") {
		for _, k := range keys {
			if strings.HasPrefix(k, hosts[1]+"/") {
				t.Errorf("stopped round stored %s row %s of the resolver it cut short", table, k)
			}
		}
	}
	if part.Measured != 1 {
		t.Errorf("stopped round stored %d resolvers, want 1 (the one measured before the stop)", part.Measured)
	}

	rest, err := campaign.Run(ctx, s, cut, targets, logger())
	if err != nil {
		t.Fatal(err)
	}
	if rest.Skipped != 1 || rest.Measured != 1 {
		t.Errorf("resumed round skipped %d and measured %d, want 1 and 1", rest.Skipped, rest.Measured)
	}
	storetest.SameCampaignRows(t, s, "cut", "whole")
}
