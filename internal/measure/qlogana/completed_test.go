package qlogana_test

import (
	"os"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// TestCompletedBy: the datagram that completed the handshake is named by the checksum of
// the last packet received before the handshake_complete update, in the order the
// client logged them (not the 1-RTT packet coalesced behind it, nor a later datagram);
// none when the handshake did not complete or that packet carries no checksum.
func TestCompletedBy(t *testing.T) {
	b, err := os.ReadFile("testdata/normal.sqlog")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := qlogana.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if sum, ok := tr.CompletedBy(); !ok || sum != 1465005299 {
		t.Errorf("normal.sqlog: CompletedBy = %d, %v; want 1465005299 (the Initial+Handshake datagram)", sum, ok)
	}

	rec := func(s string) string { return "\x1e" + s + "\n" }
	header := rec(`{"qlog_format":"JSON-SEQ","qlog_version":"0.3","trace":{"vantage_point":{"type":"client"}}}`)
	sent := rec(`{"time":0.1,"name":"transport:packet_sent","data":{"header":{"packet_type":"initial","version":"1"},"raw":{"length":1252},"frames":[{"frame_type":"crypto","offset":0,"length":300}]}}`)
	recv := func(ms, typ string, sum string) string {
		c := ""
		if sum != "" {
			c = `,"datagram_payload_checksum":` + sum
		}
		return rec(`{"time":` + ms + `,"name":"transport:packet_received","data":{"header":{"packet_type":"` + typ + `","version":"1"},"raw":{"length":600}` + c + `,"frames":[{"frame_type":"crypto","offset":0,"length":500}]}}`)
	}
	complete := rec(`{"time":2.1,"name":"quic:connection_state_updated","data":{"new":"handshake_complete"}}`)
	for _, c := range []struct {
		name string
		qlog string
		sum  uint32
		ok   bool
	}{
		{"two datagrams", header + sent + recv("1.0", "initial", "11") + recv("2.0", "handshake", "22") + complete + recv("2.2", "handshake", "33"), 22, true},
		// A later record with an earlier time does not move the completion.
		{"record order", header + sent + recv("2.0", "handshake", "22") + complete + recv("1.9", "handshake", "33"), 22, true},
		{"no checksum", header + sent + recv("1.0", "initial", "11") + recv("2.0", "handshake", "") + complete, 0, false},
		{"never complete", header + sent + recv("1.0", "initial", "11") + recv("2.0", "handshake", "22"), 0, false},
	} {
		tr, err := qlogana.Parse([]byte(c.qlog))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if sum, ok := tr.CompletedBy(); sum != c.sum || ok != c.ok {
			t.Errorf("%s: CompletedBy = %d, %v; want %d, %v", c.name, sum, ok, c.sum, c.ok)
		}
	}
	if !strings.Contains(string(b), "datagram_payload_checksum") {
		t.Fatal("the fixture has no checksums")
	}
}
