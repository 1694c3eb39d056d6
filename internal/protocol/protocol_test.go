package protocol

import (
	"slices"
	"testing"
)

// Every row is complete and consistent: a unique name and label, a default port, a
// transport and RTT probe of the three, TLS with ALPNs, modes a subset of Modes in
// their order (fresh first), variants only named ones.
func TestTableRows(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Table {
		if s.Name == "" || s.Label == "" || s.Description == "" || seen[s.Name] || seen[s.Label] {
			t.Errorf("%+v: empty or repeated name/label/description", s)
		}
		seen[s.Name], seen[s.Label] = true, true
		if len(s.Ports) == 0 || slices.Contains(s.Ports, 0) {
			t.Errorf("%s: ports %v", s.Name, s.Ports)
		}
		for _, tr := range []Transport{s.Transport, s.RTT} {
			if tr != UDP && tr != TCP && tr != QUIC {
				t.Errorf("%s: transport %q", s.Name, tr)
			}
		}
		if s.Transport == QUIC && !s.TLS {
			t.Errorf("%s: QUIC without TLS", s.Name)
		}
		if s.TLS != (len(s.ALPNs) > 0) {
			t.Errorf("%s: TLS %v with ALPNs %v", s.Name, s.TLS, s.ALPNs)
		}
		if len(s.Modes) == 0 || s.Modes[0] != ModeFresh {
			t.Errorf("%s: modes %v, want fresh first", s.Name, s.Modes)
		}
		last := -1
		for _, m := range s.Modes {
			i := slices.Index(Modes, m)
			if i <= last {
				t.Errorf("%s: modes %v not a subset of %v in its order", s.Name, s.Modes, Modes)
			}
			last = i
			if !s.TLS && (m == ModeResumed || m == Mode0RTT) {
				t.Errorf("%s: mode %s without TLS", s.Name, m)
			}
		}
		if s.EarlyData && !s.HasMode(Mode0RTT) {
			t.Errorf("%s: early data without the 0rtt mode", s.Name)
		}
		for _, v := range s.Variants {
			if v != VariantGET && v != VariantPOST {
				t.Errorf("%s: variant %q", s.Name, v)
			}
		}
		if got, ok := Lookup(s.Name); !ok || got.Name != s.Name {
			t.Errorf("Lookup(%q) = %v, %v", s.Name, got.Name, ok)
		}
	}
	if (Spec{}).DefaultPort() != 0 || (Spec{}).DefaultALPN() != "" {
		t.Error("the zero Spec (no protocol) has a port or an ALPN")
	}
	if _, ok := Lookup("DoQ"); ok {
		t.Error(`Lookup("DoQ") found a row: names are lower case, labels are not names`)
	}
}

func TestHelpTexts(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{List([]string{"a"}, "or"), "a"},
		{List([]string{"a", "b", "c"}, "or"), "a, b or c"},
		{Labels(), "DoUDP, DoTCP, DoT, DoH, DoQ and DoH3"},
		{DefaultPortsText(false), "doudp/dotcp 53, dot 853, doh/doh3 443, doq 853"},
		{DefaultPortsText(true), "doudp/dotcp 53, dot 853, doh/doh3 443, doq 853/doq"},
		{TransportSQL("m.protocol"), "CASE m.protocol WHEN 'doudp' THEN 'udp' WHEN 'dotcp' THEN 'tcp' WHEN 'dot' THEN 'tcp' " +
			"WHEN 'doh' THEN 'tcp' WHEN 'doq' THEN 'quic' WHEN 'doh3' THEN 'quic' END"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
