package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/quicwire"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/wirecap"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// flightPath is the path of TestOneServerFlightIsOneRoundTrip: a round trip so short
// that a server's own pauses inside its flight (processing, a loaded host) reach the
// client after its ACK of the flight's start.
const flightPath = time.Millisecond

// wireFlights is what the server's side of the wire (the internet link's capture) says
// about one QUIC handshake: whether the server sent Retry or Version Negotiation;
// whether it waited on its anti-amplification limit (RFC 9000 §8.1: it may send no
// more than 3x the bytes it received; a datagram that would have passed 3x what had
// arrived when its previous datagram left, sent only after more client bytes arrived),
// and for how long (pause: the longest gap before such a datagram, from the server's
// datagram before it); whether any of its datagrams was lost on the way; and whether
// part of its flight left after a client datagram arrived without having to (a flight
// split by the server).
type wireFlights struct {
	restart, blocked, lost, split bool
	pause                         time.Duration
}

func (w wireFlights) one() bool { return !w.restart && !w.blocked && !w.lost }

// serverFlights reads the handshake a client at local started towards remote at from,
// from the capture at the server's link (inet) and at the client's (vant).
func serverFlights(inet, vant *wirecap.Index, local, remote netip.AddrPort, from time.Time) (wireFlights, bool) {
	var w wireFlights
	start, end, ok := inet.QUICHandshake(local, remote, from)
	if !ok {
		return w, false
	}
	// received: client bytes that reached the server; atPrev: received when the
	// server's previous datagram of the attempt left; sent: the server's bytes.
	var received, atPrev, sent int
	var prevAt time.Time
	datagrams := 0
	for _, p := range inet.Flow(local, remote, wirecap.ProtoUDP) {
		if p.At.Before(start) || p.At.After(end) {
			continue
		}
		if p.Src == local {
			received += p.Payload
			continue
		}
		datagrams++
		if p.QUIC.Has(quicwire.Retry) || p.QUIC.Has(quicwire.VersionNegotiation) {
			w.restart = true
			received, atPrev, sent = 0, 0, 0
			continue
		}
		if sent > 0 && received > atPrev {
			if sent+p.Payload > qlogana.AmplificationFactor*atPrev {
				w.blocked = true
				w.pause = max(w.pause, p.At.Sub(prevAt))
			} else if p.QUIC.Has(quicwire.Handshake) {
				w.split = true
			}
		}
		sent += p.Payload
		atPrev = received
		prevAt = p.At
	}
	vs, ve, ok := vant.QUICHandshake(local, remote, from)
	if !ok {
		return w, false
	}
	got := 0
	for _, p := range vant.Flow(local, remote, wirecap.ProtoUDP) {
		if p.Src == remote && !p.At.Before(vs) && !p.At.After(ve) {
			got++
		}
	}
	w.lost = got < datagrams
	return w, true
}

// TestOneServerFlightIsOneRoundTrip: over a 1 ms path, fresh DoQ handshakes with real
// third-party servers (CoreDNS, AdGuard dnsproxy, its big-chain set-up among them) and
// with a server that splits its first flight into two datagrams 2 ms apart (the
// client's ACK of the first reaches it in between), both key shares: every handshake
// whose capture at the server's link shows one server flight (no Retry or Version
// Negotiation, no stop at the 3x budget, nothing lost) is analysed as 1rtt, one round
// trip; and every one whose server sent Retry (or VN), or waited on its 3x limit for a
// round trip or more, is analysed so. A server that reached its limit and paused less
// than a round trip (it was still sending, slowly on a loaded host, when our ACK came
// back) cost the handshake less than a round trip: the analysis, which sees flights
// at half an RTT's resolution, may say 1rtt or amplification, nothing else.
// DOQSCAN_FLIGHT_HANDSHAKES sets the number of handshakes (default 200).
func TestOneServerFlightIsOneRoundTrip(t *testing.T) {
	v, pop := testbed.RequirePopulation(t)
	n := testsupport.EnvInts(t, "DOQSCAN_FLIGHT_HANDSHAKES", 200)[0]
	type target struct {
		name string
		ap   netip.AddrPort
	}
	var targets []target
	for i := range pop.Records {
		r := &pop.Records[i]
		if r.Peer != population.PeerCoreDNS && r.Peer != population.PeerDNSProxy {
			continue
		}
		testbed.RequirePeer(t, pop, r)
		for _, port := range r.QUICPorts {
			targets = append(targets, target{fmt.Sprintf("%s %s", r.Peer, r.Cert), netip.AddrPortFrom(r.Prefix.Addr(), port)})
		}
	}
	if len(targets) == 0 {
		t.Skip("SKIP: the population has no CoreDNS or dnsproxy address")
	}
	// The splitting server: a quic-go DoQ server of the test's own on a silent address,
	// in the internet namespace, behind the delay line like every other.
	split := silentAddr(t, v)
	var s *measuretest.Servers
	if err := netns.Do(netns.Instance{Name: v.Instance}.Inet(), func() error {
		s = measuretest.Start(t, measuretest.Config{Host: split.String(), SplitFlight: 2 * time.Millisecond, ChainBytes: 1200})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	targets = append(targets, target{"split flight", s.DoQ})

	ctx := context.Background()
	for _, tg := range targets {
		if _, err := testbed.SetPath(ctx, home.Dir(), v.Instance, tg.ap.Addr().String(), "rtt="+flightPath.String(), "jitter=0ms", "loss=0"); err != nil {
			t.Fatal(err)
		}
		a := tg.ap.Addr().String()
		t.Cleanup(func() { _ = testbed.ResetPaths(context.Background(), home.Dir(), v.Instance, a) })
	}

	type result struct {
		tg   target
		ks   measure.KeyShare
		res  *measure.Result
		from time.Time
	}
	var results []result
	m, _ := measure.For(measure.DoQ)
	stop := startWire(t, v)
	for i := range n {
		tg := targets[i%len(targets)]
		ks := []measure.KeyShare{measure.KeyShareX25519, measure.KeyShareMLKEM}[i/len(targets)%2]
		req := measure.Request{Addr: tg.ap, ALPN: []string{"doq"}, KeyShare: ks, Peer: measure.NewPeer(), Timeout: 5 * time.Second}
		res := m.Measure(ctx, &req)
		if res.Status != measure.StatusOK || res.QlogTrace == nil {
			t.Errorf("%s %v %s: %s: %v", tg.name, tg.ap, ks, res.Status, res.Err)
			continue
		}
		results = append(results, result{tg, ks, res, res.CryptoFrom})
	}
	c := stop()

	type cell struct {
		name, flights, cause string
	}
	counts := map[cell]int{}
	splitSeen, stalls := 0, 0
	for _, r := range results {
		w, ok := serverFlights(c.inet, c.vant, r.res.Local, r.tg.ap, r.from)
		if !ok {
			t.Errorf("%s %v: the handshake is not on the captures", r.tg.name, r.tg.ap)
			continue
		}
		a, err := r.res.QlogTrace.Analyze(qlogana.Options{RTTNS: int64(flightPath)})
		if err != nil {
			t.Fatal(err)
		}
		flights := "one flight"
		switch {
		case w.restart:
			flights = "retry/vn"
		case w.blocked && w.pause >= flightPath:
			flights = "3x limit"
			stalls++
		case w.blocked:
			flights = "3x, <1 RTT"
		case w.lost:
			flights = "lost"
		}
		counts[cell{r.tg.name + " " + string(r.ks), flights, a.Cause}]++
		if w.one() && w.split {
			splitSeen++
		}
		switch {
		case w.one() && (a.Cause != qlogana.Cause1RTT || a.RoundTrips != 1):
			t.Errorf("%s %v %s: the server sent one flight (split after our ACK: %v), the analysis says %s in %d round trips (flights %+v)",
				r.tg.name, r.tg.ap, r.ks, w.split, a.Cause, a.RoundTrips, a.Flights)
		case w.restart && !a.Retry && !a.VersionNegotiation,
			w.blocked && !w.lost && w.pause >= flightPath && !a.AmplificationStall,
			w.blocked && !w.lost && !w.restart && w.pause < flightPath && a.Cause != qlogana.Cause1RTT && a.Cause != qlogana.CauseAmplification:
			t.Errorf("%s %v %s: the wire shows %s (the server paused %v at its limit), the analysis says %s (flights %+v)",
				r.tg.name, r.tg.ap, r.ks, flights, w.pause, a.Cause, a.Flights)
		}
	}
	for k, n := range counts {
		t.Logf("%-40s %-10s analysed %-13s %3d", k.name, k.flights, k.cause, n)
	}
	if stalls == 0 {
		t.Error("no server waited a round trip at its 3x limit: the stall case is not exercised")
	}
	if splitSeen == 0 {
		t.Error("no one-flight handshake had part of its flight leave after the client's ACK arrived: the split case is not exercised")
	}
	t.Logf("%d handshakes, %d one-flight ones split around the client's ACK", len(results), splitSeen)
}
