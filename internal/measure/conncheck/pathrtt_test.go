package conncheck

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// busyStartQlog is a client qlog (quic-go's JSON-SEQ) of a handshake over a 1 ms path
// whose client was busy when it started: quic-go logged its Initial at 0 and the packet
// left 7 ms later, and it read every packet late (min_rtt 20 ms). The server's first
// flight arrives at 8 ms and stops at 3x our 1,252 bytes; our ACK leaves at 8.05 ms, the
// server waits for it (half a round trip there) and the rest of its flight arrives at
// 9.15 ms: an amplification stall of one round trip. Against the qlog's own RTT
// (min_rtt capped by the first answer, 8 ms) the 1.1 ms between our ACK and the rest is
// no round trip; against the path's 1 ms it is.
func busyStartQlog() []byte {
	var b strings.Builder
	rec := func(s string) { b.WriteString("\x1e" + s + "\n") }
	rec(`{"qlog_format":"JSON-SEQ","qlog_version":"0.3","trace":{"vantage_point":{"type":"client"},` +
		`"common_fields":{"reference_time":{"clock_type":"monotonic","epoch":"unknown","wall_clock_time":"2026-11-27T12:00:00Z"}}}}`)
	pkt := func(ms float64, sent bool, ptype string, length int, frames string) {
		name := "transport:packet_received"
		if sent {
			name = "transport:packet_sent"
		}
		rec(fmt.Sprintf(`{"time":%g,"name":%q,"data":{"header":{"packet_type":%q,"version":"1"},"raw":{"length":%d},"frames":[%s]}}`,
			ms, name, ptype, length, frames))
	}
	crypto := func(off, n int) string { return fmt.Sprintf(`{"frame_type":"crypto","offset":%d,"length":%d}`, off, n) }
	pkt(0, true, "initial", 1252, crypto(0, 300))
	pkt(8.0, false, "initial", 150, crypto(0, 90))
	pkt(8.0, false, "handshake", 1100, crypto(0, 1000))
	pkt(8.05, true, "initial", 1252, `{"frame_type":"ack"}`)
	pkt(8.1, false, "handshake", 1250, crypto(1000, 1200))
	pkt(8.2, false, "handshake", 1250, crypto(2200, 1200))
	pkt(9.15, false, "handshake", 900, crypto(3400, 800))
	rec(`{"time":9.3,"name":"recovery:metrics_updated","data":{"min_rtt":20}}`)
	rec(`{"time":9.3,"name":"quic:connection_state_updated","data":{"new":"handshake_complete"}}`)
	return []byte(b.String())
}

// TestHandshakesExplainedAgainstThePathRTT: the check explains a DoQ handshake against
// the path RTT its probe measured (as the hourly round does), not against the qlog's own
// RTT, which the client's load inflates: a stall the qlog's RTT hides is found, and the
// analysis says which RTT it used. Without a path RTT the qlog's own analysis stays.
func TestHandshakesExplainedAgainstThePathRTT(t *testing.T) {
	tr, err := qlogana.Parse(busyStartQlog())
	if err != nil {
		t.Fatal(err)
	}
	own, err := tr.Analyze()
	if err != nil {
		t.Fatal(err)
	}
	if own.AmplificationStall || own.RoundTrips != 1 || own.RTTNS != int64(8*time.Millisecond) {
		t.Fatalf("against the qlog's own RTT (%v): stall %v in %d round trips; the case needs that RTT to hide the stall",
			time.Duration(own.RTTNS), own.AmplificationStall, own.RoundTrips)
	}
	res := &measure.Result{Status: measure.StatusOK, HasHandshake: true, QlogTrace: tr, QlogAnalysis: own}

	path := Policy{PathRTT: time.Millisecond}
	a := path.explain(res)
	if a == nil || !a.AmplificationStall || a.RoundTrips != 2 || a.Cause != qlogana.CauseAmplification || a.RTTNS != int64(time.Millisecond) {
		t.Errorf("against the path's 1 ms: %+v; want an amplification stall in 2 round trips, RTT 1 ms", a)
	}
	if s := path.stalled(res); s == nil || !*s {
		t.Errorf("stalled %s, want true", boolString(s))
	}

	var none Policy // no probe answered
	if a := none.explain(res); a != own {
		t.Errorf("without a path RTT: %+v, want the qlog's own analysis", a)
	}
	if s := none.stalled(res); s == nil || *s {
		t.Errorf("without a path RTT: stalled %s, want false (the qlog's own)", boolString(s))
	}
}

func boolString(b *bool) string {
	if b == nil {
		return "unknown"
	}
	return fmt.Sprint(*b)
}
