package measure

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/doqscan/doqscan/internal/measure/rtt"
)

func TestProtocolTransport(t *testing.T) {
	want := map[Protocol]rtt.Transport{DoUDP: rtt.UDP, DoTCP: rtt.TCP, DoT: rtt.TCP, DoH: rtt.TCP, DoQ: rtt.QUIC, DoH3: rtt.QUIC}
	for _, p := range Protocols {
		if got := p.Transport(); got != want[p] {
			t.Errorf("%s.Transport() = %s, want %s", p, got, want[p])
		}
	}
}

// TestProtocolTableMatchesPython checks that the analysis pairs RTT samples with
// handshakes by the same protocol table (doqscan_analysis.names).
func TestProtocolTableMatchesPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: cannot read the analysis package's protocol table")
	}
	cmd := exec.Command(python, "-c", "import json; from doqscan_analysis import names; "+
		"print(json.dumps({'protocols': names.PROTOCOLS, 'transport': names.PROTOCOL_TRANSPORT}))")
	cmd.Env = append(cmd.Environ(), "PYTHONPATH=../../analysis")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var py struct {
		Protocols []Protocol                 `json:"protocols"`
		Transport map[Protocol]rtt.Transport `json:"transport"`
	}
	if err := json.Unmarshal(out, &py); err != nil {
		t.Fatal(err)
	}
	if len(py.Protocols) != len(Protocols) {
		t.Fatalf("python protocols %v, go %v", py.Protocols, Protocols)
	}
	for i, p := range Protocols {
		if py.Protocols[i] != p || py.Transport[p] != p.Transport() {
			t.Errorf("%s: python %s/%s, go %s/%s", p, py.Protocols[i], py.Transport[p], p, p.Transport())
		}
	}
}
