package optout

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/probe"
	"github.com/doqscan/doqscan/internal/store"
)

// The page's list of what the tools send agrees with the code's tables: the scan's
// default ports, every protocol measure knows, with the ports of its default endpoints.
func TestContactsMatchTheCode(t *testing.T) {
	if !slices.Equal(sorted(doqPorts()), sorted(probe.DefaultQUICPorts)) {
		t.Errorf("the page's QUIC scan ports %v, zprobe's %v", doqPorts(), probe.DefaultQUICPorts)
	}
	if !slices.Equal(probe.DefaultDNSPorts, []uint16{measure.PortDNS}) {
		t.Errorf("zprobe's DNS ports %v", probe.DefaultDNSPorts)
	}
	targets, err := campaign.ParseTargets(strings.NewReader("192.0.2.1\n"), "targets")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range measure.Protocols {
		measured := measured()
		i := slices.IndexFunc(measured, func(m measuredContact) bool { return m.Protocol == p })
		if i < 0 {
			t.Errorf("measure protocol %s is not on the page", p)
			continue
		}
		for _, ep := range targets[0].Endpoints {
			if ep.Protocol == p && !slices.Contains(measured[i].Ports, ep.Port) {
				t.Errorf("%s: measure's default port %d is not on the page (%v)", p, ep.Port, measured[i].Ports)
			}
		}
	}
	if got, want := Ports(), "TCP 53, 443, 853; UDP 53, 443, 784, 853, 8853"; got != want {
		t.Errorf("Ports() = %q, want %q", got, want)
	}
}

func sorted(p []uint16) []uint16 { p = slices.Clone(p); slices.Sort(p); return p }

// The page says what happens to a request under each policy, shows the visitor's
// address, lists every port and protocol, and makes no promise the code does not keep.
func TestPageText(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		want   []string
	}{
		{PolicyOwnRange, []string{`<span id="source">192.0.2.60</span>`, "up to a /24 (IPv4) or /48 (IPv6), is honoured at once", "Any other request is recorded and\nwaits for review"}},
		{PolicyAll, []string{"Every request is honoured at once"}},
		{PolicyReviewAll, []string{"Every request is\nrecorded and waits for review"}},
	} {
		srv := &Server{Store: nil, BlocklistDir: t.TempDir(), Info: DefaultInfo, Log: quiet, Policy: tc.policy}
		srv.Store = countedStoreOnly(t)
		_, body := getPage(t, srv)
		for _, w := range append(tc.want, Ports(), "DNS over HTTPS over HTTP/3", "UDP 443",
			fmt.Sprintf("more than %d probes per second on average towards any /16", 250),
			"a TCP SYN that is never completed", "no data about it is collected from then on") {
			if !strings.Contains(body, w) {
				t.Errorf("%s: the page lacks %q", tc.policy, w)
			}
		}
		for _, gone := range []string{"few hundred", "never for addresses that opt out", "per-address data only for public resolvers"} {
			if strings.Contains(body, gone) {
				t.Errorf("%s: the page still promises %q", tc.policy, gone)
			}
		}
	}
}

func countedStoreOnly(t *testing.T) *store.Store {
	st, _, _ := countedStore(t)
	return st
}
