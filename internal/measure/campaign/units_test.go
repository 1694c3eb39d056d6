package campaign

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/measure"
)

// The units of a resolver with every protocol, mode, DoH variant and two key shares:
// DoUDP only fresh (no TLS, no session), DoTCP fresh and persistent (no TLS), the TLS
// protocols every mode with each key share, DoH and DoH3 each variant too.
func TestUnitsFollowTheProtocolTable(t *testing.T) {
	r := &runner{cfg: Config{
		Protocols:   measure.Protocols,
		Modes:       measure.Modes,
		KeyShares:   []measure.KeyShare{measure.KeyShareX25519, measure.KeyShareMLKEM},
		DoHVariants: []string{measure.VariantGET, measure.VariantPOST},
	}}
	tg := Target{Addr: netip.MustParseAddr("192.0.2.1")}
	for _, p := range measure.Protocols {
		tg.Endpoints = append(tg.Endpoints, defaultEndpoints(p)...)
	}
	got := map[measure.Protocol][]string{}
	for _, u := range r.units(tg) {
		got[u.ep.Protocol] = append(got[u.ep.Protocol], fmt.Sprintf("%s/%s/%s", u.variant, u.mode, u.ks))
	}
	tlsUnits := func(variants ...string) []string {
		var out []string
		for _, v := range variants {
			for _, m := range []string{"fresh", "resumed", "0rtt", "persistent"} {
				for _, ks := range []string{"x25519", "x25519mlkem768"} {
					out = append(out, v+"/"+m+"/"+ks)
				}
			}
		}
		return out
	}
	want := map[measure.Protocol][]string{
		measure.DoUDP: {"/fresh/"},
		measure.DoTCP: {"/fresh/", "/persistent/"},
		measure.DoT:   tlsUnits(""),
		measure.DoH:   tlsUnits("GET", "POST"),
		measure.DoQ:   tlsUnits(""),
		measure.DoH3:  tlsUnits("GET", "POST"),
	}
	for _, p := range measure.Protocols {
		if !slices.Equal(got[p], want[p]) {
			t.Errorf("%s units:\n got %s\nwant %s", p, strings.Join(got[p], " "), strings.Join(want[p], " "))
		}
	}
	if len(got) != len(want) {
		t.Errorf("units of %d protocols, want %d", len(got), len(want))
	}
}
