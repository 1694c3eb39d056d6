package measure

import (
	"encoding/json"
	"maps"
	"os/exec"
	"slices"
	"testing"

	"github.com/doqscan/doqscan/internal/measure/rtt"
	"github.com/doqscan/doqscan/internal/testsupport"
)

func TestProtocolTransport(t *testing.T) {
	want := map[Protocol]rtt.Transport{DoUDP: rtt.UDP, DoTCP: rtt.TCP, DoT: rtt.TCP, DoH: rtt.TCP, DoQ: rtt.QUIC, DoH3: rtt.QUIC}
	for _, p := range Protocols {
		if got := p.Transport(); got != want[p] {
			t.Errorf("%s.Transport() = %s, want %s", p, got, want[p])
		}
	}
}

// TestProtocolTableMatchesPython checks that the analysis names, orders and labels the
// protocols as internal/protocol's table does, and pairs RTT samples with handshakes by
// the same transports (doqscan_analysis.names): every per-protocol dict has exactly the
// table's protocols.
func TestProtocolTableMatchesPython(t *testing.T) {
	python := testsupport.ReportPython(t, "", "analysis package's protocol table")
	cmd := exec.Command(python, "-c", "import json; from doqscan_analysis import names; "+
		"print(json.dumps({'protocols': names.PROTOCOLS, 'transport': names.PROTOCOL_TRANSPORT, "+
		"'labels': names.PROTOCOL_LABELS, 'colors': names.PROTOCOL_COLORS, 'dox': names.DOX_PROTOCOLS}))")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", python, err)
	}
	var py struct {
		Protocols []Protocol                 `json:"protocols"`
		Transport map[Protocol]rtt.Transport `json:"transport"`
		Labels    map[Protocol]string        `json:"labels"`
		Colors    map[Protocol]string        `json:"colors"`
		DoX       []Protocol                 `json:"dox"`
	}
	if err := json.Unmarshal(out, &py); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(py.Protocols, Protocols) {
		t.Errorf("names.PROTOCOLS %v, the table %v (same order: the figures list them so)", py.Protocols, Protocols)
	}
	for _, p := range Protocols {
		s := p.Spec()
		if py.Transport[p] != rtt.Transport(s.RTT) || py.Labels[p] != s.Label {
			t.Errorf("%s: python transport %q, label %q; the table %q, %q", p, py.Transport[p], py.Labels[p], s.RTT, s.Label)
		}
		if py.Colors[p] == "" {
			t.Errorf("%s: no colour in names.PROTOCOL_COLORS", p)
		}
	}
	for what, keys := range map[string][]Protocol{
		"PROTOCOL_TRANSPORT": slices.Collect(maps.Keys(py.Transport)), "PROTOCOL_LABELS": slices.Collect(maps.Keys(py.Labels)),
		"PROTOCOL_COLORS": slices.Collect(maps.Keys(py.Colors)), "DOX_PROTOCOLS": py.DoX,
	} {
		for _, p := range keys {
			if !slices.Contains(Protocols, p) {
				t.Errorf("names.%s names %q, not a protocol of the table", what, p)
			}
		}
	}
}
