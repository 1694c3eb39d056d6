package qlogana_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// pkt is one packet of a synthetic client qlog: at ms, sent or received, its type and
// length, and its CRYPTO frames (offset, length).
type pkt struct {
	ms     float64
	sent   bool
	ptype  string
	length int
	crypto [][2]int
	other  string // another frame type (ack, ping), or ""
	sum    uint32 // received: its datagram's checksum (0: none)
}

// synthRef is the wall-clock reference time of synthQlog's trace.
var synthRef = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// synthQlog writes pkts as quic-go's JSON-SEQ, with the path's RTT as min_rtt and the
// handshake completing at completeMS; lostMS adds packet_lost events. A received packet
// with a sum gets it as its datagram_payload_checksum.
func synthQlog(rttMS, completeMS float64, pkts []pkt, lostMS ...float64) []byte {
	var b strings.Builder
	rec := func(s string) { b.WriteString("\x1e" + s + "\n") }
	rec(`{"qlog_format":"JSON-SEQ","qlog_version":"0.3","trace":{"vantage_point":{"type":"client"},` +
		`"common_fields":{"reference_time":{"clock_type":"monotonic","epoch":"unknown","wall_clock_time":"` + synthRef.Format(time.RFC3339Nano) + `"}}}}`)
	for _, p := range pkts {
		var frames []string
		for _, c := range p.crypto {
			frames = append(frames, fmt.Sprintf(`{"frame_type":"crypto","offset":%d,"length":%d}`, c[0], c[1]))
		}
		if p.other != "" {
			frames = append(frames, fmt.Sprintf(`{"frame_type":%q}`, p.other))
		}
		name := "transport:packet_received"
		if p.sent {
			name = "transport:packet_sent"
		}
		sum := ""
		if p.sum != 0 {
			sum = fmt.Sprintf(`,"datagram_payload_checksum":%d`, p.sum)
		}
		rec(fmt.Sprintf(`{"time":%g,"name":%q,"data":{"header":{"packet_type":%q,"version":"1"},"raw":{"length":%d}%s,"frames":[%s]}}`,
			p.ms, name, p.ptype, p.length, sum, strings.Join(frames, ",")))
	}
	for _, l := range lostMS {
		rec(fmt.Sprintf(`{"time":%g,"name":"recovery:packet_lost","data":{"header":{"packet_type":"initial"}}}`, l))
	}
	rec(fmt.Sprintf(`{"time":%g,"name":"recovery:metrics_updated","data":{"min_rtt":%g}}`, completeMS, rttMS))
	rec(fmt.Sprintf(`{"time":%g,"name":"quic:connection_state_updated","data":{"new":"handshake_complete"}}`, completeMS))
	return []byte(b.String())
}

// TestFlightsAreTheServers: a round trip is counted when the server waited for us, not
// when its flight reached us spread out or our client's timers fired in between.
func TestFlightsAreTheServers(t *testing.T) {
	initial := pkt{ms: 0, sent: true, ptype: "initial", length: 1252, crypto: [][2]int{{0, 300}}}
	for _, c := range []struct {
		name      string
		rtt, done float64
		pkts      []pkt
		lost      []float64
		cause     string
		trips     int
		client    int // ClientInitialBytes
	}{
		{
			// One flight sent as two datagrams 2 ms apart on a 1 ms path (the server's
			// own processing), our ACK of the first in between.
			name: "flight split by the server", rtt: 1, done: 3.05,
			pkts: []pkt{initial,
				{ms: 1.0, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}},
				{ms: 1.0, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}},
				{ms: 1.02, sent: true, ptype: "initial", length: 1252, other: "ack"},
				{ms: 3.0, ptype: "handshake", length: 400, crypto: [][2]int{{1000, 300}}},
			},
			cause: qlogana.Cause1RTT, trips: 1, client: 1252,
		},
		{
			// The hybrid key share's second Initial leaves 0.8 ms after the first on a
			// 1 ms path: both are the server's budget, and its flight is one.
			name: "two Initials", rtt: 1, done: 2.9,
			pkts: []pkt{initial,
				{ms: 0.8, sent: true, ptype: "initial", length: 1252, crypto: [][2]int{{300, 900}}},
				{ms: 1.1, ptype: "initial", length: 60, other: "ack"},
				{ms: 1.85, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}},
				{ms: 1.85, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}},
				{ms: 1.9, sent: true, ptype: "initial", length: 1252, other: "ack"},
				{ms: 2.85, ptype: "handshake", length: 1200, crypto: [][2]int{{1000, 1100}}},
			},
			cause: qlogana.Cause1RTT, trips: 1, client: 2504,
		},
		{
			// The same on a busy client: its min_rtt (6 ms, taken when it got round to
			// reading) is more than twice the 1.85 ms between our first Initial and the
			// answer's arrival stamp. The answer still proves both Initials arrived.
			name: "two Initials, min_rtt of a busy client", rtt: 6, done: 2.9,
			pkts: []pkt{initial,
				{ms: 0.8, sent: true, ptype: "initial", length: 1252, crypto: [][2]int{{300, 900}}},
				{ms: 1.1, ptype: "initial", length: 60, other: "ack"},
				{ms: 1.85, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}},
				{ms: 1.85, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}},
				{ms: 1.9, sent: true, ptype: "initial", length: 1252, other: "ack"},
				{ms: 2.85, ptype: "handshake", length: 1200, crypto: [][2]int{{1000, 1100}}},
			},
			cause: qlogana.Cause1RTT, trips: 1, client: 2504,
		},
		{
			// One Initial, min_rtt of a busy client (4 ms) against a 1 ms answer.
			name: "one Initial, min_rtt of a busy client", rtt: 4, done: 3.05,
			pkts: []pkt{initial,
				{ms: 1.0, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}},
				{ms: 1.0, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}},
				{ms: 1.02, sent: true, ptype: "initial", length: 1252, other: "ack"},
				{ms: 3.0, ptype: "handshake", length: 400, crypto: [][2]int{{1000, 300}}},
			},
			cause: qlogana.Cause1RTT, trips: 1, client: 1252,
		},
		{
			// A quick ACK gives a 1 ms RTT sample, the server's flight comes 5 ms later
			// (slow signing), and our client's probe timer fires in between: a probe of
			// ours is no loss and no round trip.
			name: "our probe", rtt: 1, done: 6.2,
			pkts: []pkt{initial,
				{ms: 1.0, ptype: "initial", length: 60, other: "ack"},
				{ms: 3.5, sent: true, ptype: "initial", length: 1252, crypto: [][2]int{{0, 300}}},
				{ms: 5.0, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}},
				{ms: 5.0, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}},
				{ms: 5.02, sent: true, ptype: "handshake", length: 50, other: "ack"},
				{ms: 6.1, ptype: "handshake", length: 300, crypto: [][2]int{{1000, 200}}},
			},
			cause: qlogana.Cause1RTT, trips: 1, client: 2504,
		},
		{
			// The server stops at its 3x budget and sends the rest one RTT after our
			// ACK: a stall, two flights.
			name: "amplification", rtt: 20, done: 41,
			pkts: []pkt{initial,
				{ms: 20, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}},
				{ms: 20, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}},
				{ms: 20.1, sent: true, ptype: "initial", length: 1252, other: "ack"},
				{ms: 20.2, ptype: "handshake", length: 1250, crypto: [][2]int{{1000, 1200}}},
				{ms: 20.3, ptype: "handshake", length: 1250, crypto: [][2]int{{2200, 1200}}},
				{ms: 40.2, ptype: "handshake", length: 900, crypto: [][2]int{{3400, 800}}},
			},
			cause: qlogana.CauseAmplification, trips: 2, client: 1252,
		},
		{
			// The server's first Handshake datagram is lost: the end of its CRYPTO data
			// arrives first, the start one RTT after our ACK shows the hole.
			name: "server loss", rtt: 20, done: 41,
			pkts: []pkt{initial,
				{ms: 20, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}},
				{ms: 20, ptype: "handshake", length: 500, crypto: [][2]int{{1000, 400}}},
				{ms: 20.1, sent: true, ptype: "handshake", length: 50, other: "ack"},
				{ms: 40.5, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}},
			},
			cause: qlogana.CauseLoss, trips: 2, client: 1252,
		},
		{
			// The server stops at its 3x budget for 6 ms on a 1 ms path, on a busy client
			// whose min_rtt (20 ms, taken when it read the packets) would make the pause
			// look like the server's own pace: the first answer's arrival, 1 ms after our
			// Initial left, bounds the RTT.
			name: "amplification, min_rtt of a busy client", rtt: 20, done: 8.5,
			pkts: []pkt{initial,
				{ms: 1.0, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}},
				{ms: 1.0, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}},
				{ms: 1.05, sent: true, ptype: "initial", length: 1252, other: "ack"},
				{ms: 1.1, ptype: "handshake", length: 1250, crypto: [][2]int{{1000, 1200}}},
				{ms: 1.2, ptype: "handshake", length: 1250, crypto: [][2]int{{2200, 1200}}},
				{ms: 7.3, ptype: "handshake", length: 900, crypto: [][2]int{{3400, 800}}},
			},
			cause: qlogana.CauseAmplification, trips: 2, client: 1252,
		},
		{
			// Our Initial is lost: quic-go declares it lost once the server answers our
			// retransmission.
			name: "our loss", rtt: 20, done: 230,
			pkts: []pkt{initial,
				{ms: 200, sent: true, ptype: "initial", length: 1252, crypto: [][2]int{{0, 300}}},
				{ms: 220, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}},
				{ms: 220, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}},
			},
			lost:  []float64{220},
			cause: qlogana.CauseLoss, trips: 1, client: 2504,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := qlogana.Analyze(synthQlog(c.rtt, c.done, c.pkts, c.lost...))
			if err != nil {
				t.Fatal(err)
			}
			if a.Cause != c.cause || a.RoundTrips != c.trips || a.ClientInitialBytes != c.client {
				t.Errorf("cause %s, %d round trips, client bytes %d; want %s, %d, %d (flights %+v)",
					a.Cause, a.RoundTrips, a.ClientInitialBytes, c.cause, c.trips, c.client, a.Flights)
			}
		})
	}
}

// TestArrivalsTimeTheServersPackets: the server sends 3x our bytes and stops; a busy
// client gets to the last datagram of that first part 11 ms after it arrived (one RTT is
// 20 ms), after it had acknowledged the first. By quic-go's packet_received times the
// server went on sending after our ACK reached it, so the ACK looks like budget it had,
// and the rest, one RTT after that ACK, is read as the same flight. The arrivals record
// (the kernel's receive times, by checksum) puts the datagram where it arrived, and the
// stall is found. A packet whose arrival is not recorded, or is recorded later than
// quic-go's own time, keeps the qlog's time.
func TestArrivalsTimeTheServersPackets(t *testing.T) {
	pkts := []pkt{{ms: 0, sent: true, ptype: "initial", length: 1252, crypto: [][2]int{{0, 300}}},
		{ms: 20, ptype: "initial", length: 150, crypto: [][2]int{{0, 90}}, sum: 11},
		{ms: 20, ptype: "handshake", length: 1100, crypto: [][2]int{{0, 1000}}, sum: 11},
		{ms: 20.05, sent: true, ptype: "initial", length: 1252, other: "ack"},
		{ms: 20.1, ptype: "handshake", length: 1250, crypto: [][2]int{{1000, 1200}}, sum: 22},
		{ms: 31, ptype: "handshake", length: 1250, crypto: [][2]int{{2200, 1200}}, sum: 33}, // arrived at 20.15
		{ms: 31.05, sent: true, ptype: "handshake", length: 50, other: "ack"},
		{ms: 40.2, ptype: "handshake", length: 900, crypto: [][2]int{{3400, 800}}, sum: 44},
	}
	q := synthQlog(20, 41, pkts)
	late, err := qlogana.Analyze(q)
	if err != nil {
		t.Fatal(err)
	}
	if late.AmplificationStall || late.RoundTrips != 1 {
		t.Fatalf("without arrivals: stall %v, %d round trips; the case needs the qlog's times to hide the stall", late.AmplificationStall, late.RoundTrips)
	}
	at := func(ms float64) time.Time { return synthRef.Add(time.Duration(ms * float64(time.Millisecond))) }
	arr := qlogana.ArrivalsRecord([]qlogana.Arrival{{Checksum: 11, At: at(20)}, {Checksum: 22, At: at(20.1)},
		{Checksum: 33, At: at(20.15)}, {Checksum: 44, At: at(40.1)}, {Checksum: 99, At: at(1)}})
	a, err := qlogana.Analyze(append(q, arr...))
	if err != nil {
		t.Fatal(err)
	}
	if !a.AmplificationStall || a.RoundTrips != 2 || a.Cause != qlogana.CauseAmplification || a.ClientInitialBytes != 1252 {
		t.Errorf("with arrivals: stall %v, %d round trips, cause %s, client bytes %d; want a stall at 3 x 1,252 bytes in 2 (flights %+v)",
			a.AmplificationStall, a.RoundTrips, a.Cause, a.ClientInitialBytes, a.Flights)
	}
	if len(a.Flights) > 0 && a.Flights[0].EndNS != int64(20.15*float64(time.Millisecond)) {
		t.Errorf("first flight ends at %v, want its last datagram's arrival, 20.15 ms", time.Duration(a.Flights[0].EndNS))
	}
	bad := qlogana.ArrivalsRecord([]qlogana.Arrival{{Checksum: 33, At: at(35)}})
	b, err := qlogana.Analyze(append(q, bad...))
	if err != nil {
		t.Fatal(err)
	}
	if b.AmplificationStall || b.RoundTrips != 1 {
		t.Errorf("an arrival after quic-go's own time was taken: stall %v, %d round trips", b.AmplificationStall, b.RoundTrips)
	}
}
