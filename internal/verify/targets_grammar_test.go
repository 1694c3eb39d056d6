package verify_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/verify"
)

// TestOneTargetsGrammar: verify and measure read one targets file the same way: every
// line either tool accepts, the other accepts too, and the DoQ endpoints verify checks
// are the ones measure measures (addr:port is DoQ on that port, a bare address DoQ on
// 853, doq=PORT one more); a line one of them refuses, the other refuses.
func TestOneTargetsGrammar(t *testing.T) {
	const file = "198.19.0.7:784\n" +
		"198.19.0.8 sni=dns.test doq=853/doq-i02 dot=853\n" +
		"[2001:2::7]   # comment\n" +
		"198.19.0.9 doq=784 doq=8853\n" +
		"[2001:2::8]:8853 doudp=5353\n"
	vts, err := verify.ReadTargets(strings.NewReader(file), "t.txt")
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	mts, err := campaign.ParseTargets(strings.NewReader(file), "t.txt")
	if err != nil {
		t.Fatalf("measure: %v", err)
	}
	var fromVerify, fromMeasure []string
	for _, v := range vts {
		fromVerify = append(fromVerify, v.Addr.String())
	}
	for _, m := range mts {
		for _, ep := range m.Endpoints {
			if ep.Protocol == measure.DoQ {
				fromMeasure = append(fromMeasure, netip.AddrPortFrom(m.Addr, ep.Port).String())
			}
		}
	}
	want := []string{"198.19.0.7:784", "198.19.0.8:853", "[2001:2::7]:853", "198.19.0.9:784", "198.19.0.9:8853", "[2001:2::8]:8853"}
	if !slices.Equal(fromVerify, want) || !slices.Equal(fromMeasure, want) {
		t.Errorf("DoQ endpoints: verify %q, measure %q; want %q", fromVerify, fromMeasure, want)
	}
	if vts[1].ServerName != "dns.test" || mts[1].ServerName != "dns.test" {
		t.Errorf("sni=dns.test: verify %q, measure %q", vts[1].ServerName, mts[1].ServerName)
	}
	for _, bad := range []string{"198.19.0.7 foo=53", "198.19.0.7 dot=853/doq", "198.19.0.7 doq=853/h3", "198.19.0.7:0", "nonsense"} {
		_, verr := verify.ReadTargets(strings.NewReader(bad), "t.txt")
		_, merr := campaign.ParseTargets(strings.NewReader(bad), "t.txt")
		if verr == nil || merr == nil {
			t.Errorf("%q: verify %v, measure %v; want both to refuse it", bad, verr, merr)
		}
	}
}
