package qlogana_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// delay is the emulated one-way delay the QUIC test servers add to what they send: it
// makes one RTT long enough against loopback scheduling noise to see flights.
const delay = 15 * time.Millisecond

// pair runs a warm-up and a measured DoQ exchange with the same peer state (the study's
// method) and returns both analyses.
func pair(t *testing.T, s *measuretest.Servers) (warm, meas *qlogana.Analysis) {
	a, _ := pairResults(t, s)
	return a[0], a[1]
}

func pairResults(t *testing.T, s *measuretest.Servers) ([2]*qlogana.Analysis, [2]*measure.Result) {
	t.Helper()
	m, _ := measure.For(measure.DoQ)
	peer := measure.NewPeer()
	var out [2]*qlogana.Analysis
	var results [2]*measure.Result
	for i := range out {
		res := m.Measure(context.Background(), &measure.Request{Addr: s.DoQ, Peer: peer, KeyShare: measure.KeyShareX25519, Timeout: 3 * time.Second})
		if res.Status != measure.StatusOK {
			t.Fatalf("exchange %d: %s %v", i, res.Status, res.Err)
		}
		if dir := os.Getenv("QLOG_DIR"); dir != "" {
			_ = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name()[len("TestAnalyze"):], "/", "_")+[]string{"-warm", "-meas"}[i]+".sqlog"), res.Qlog, 0o644)
		}
		a, err := qlogana.Analyze(res.Qlog)
		if err != nil {
			t.Fatal(err)
		}
		// The result's handshake runs from the first Initial's write to the kernel's
		// arrival stamp of the completing datagram; the qlog's from quic-go packing that
		// Initial to quic-go processing the datagram. Both time the same handshake, but
		// how far apart they are is the client's own processing and scheduling (a loaded
		// machine or the race detector stretches it, and a late read can make a later
		// datagram of the flight the completing one): only that both are there and of
		// the same handshake (the result within twice the qlog's) is checked. The
		// figures are BenchmarkHandshakeDelays'.
		if qh := time.Duration(a.HandshakeNS); res.Handshake <= 0 || qh <= 0 || res.Handshake > 2*qh {
			t.Fatalf("handshake: result %v, qlog %v", res.Handshake, qh)
		}
		out[i], results[i] = a, res
	}
	return out, results
}

// delays is the handshake in units of the emulated delay: one RTT is `delay` here (the
// server adds it one way; the client's side is loopback).
func delays(a *qlogana.Analysis) float64 { return float64(a.HandshakeNS) / float64(delay) }

// check asserts what the analysis decides: the cause and the round trips counted. How
// long the handshake took on the wall clock is not asserted (it was "~trips delays" and
// failed on a loaded machine under the race detector: "handshake 45.576585ms is 3.04
// delays, want ~1", a test of the scheduler, not of the analysis), only logged; the
// figures are BenchmarkHandshakeDelays'. The testbed's e2e benchmarks hold the timing
// error against emulated RTTs.
func check(t *testing.T, name string, a *qlogana.Analysis, cause string, trips int) {
	t.Helper()
	t.Logf("%s: cause %s trips %d hs %v (%.2f delays) client %d server-pre-ack %d stall %v flights %+v",
		name, a.Cause, a.RoundTrips, time.Duration(a.HandshakeNS), delays(a), a.ClientInitialBytes, a.ServerBytesPreAck, time.Duration(a.StallNS), a.Flights)
	if a.Cause != cause || a.RoundTrips != trips {
		t.Errorf("%s: cause %s, %d round trips; want %s, %d", name, a.Cause, a.RoundTrips, cause, trips)
	}
	if !a.HandshakeComplete || a.HandshakeNS <= 0 {
		t.Errorf("%s: handshake complete %v in %v; want a completed handshake", name, a.HandshakeComplete, time.Duration(a.HandshakeNS))
	}
}

// BenchmarkHandshakeDelays prints how long a 1-RTT DoQ handshake to the loopback test
// server took in units of its emulated delay (ideal: 1; the rest is loopback and the
// client's and server's scheduling), for the warm-up (fresh) and the measured (token,
// resumption) connection: the wall-clock figures TestAnalyzeNormal no longer bounds.
func BenchmarkHandshakeDelays(b *testing.B) {
	s := measuretest.Start(b, measuretest.Config{Host: "127.0.0.3", QUICDelay: delay})
	m, _ := measure.For(measure.DoQ)
	var warm, meas []float64
	for b.Loop() {
		peer := measure.NewPeer()
		for i := range 2 {
			res := m.Measure(context.Background(), &measure.Request{Addr: s.DoQ, Peer: peer, KeyShare: measure.KeyShareX25519, Timeout: 3 * time.Second})
			if res.Status != measure.StatusOK {
				b.Fatalf("exchange %d: %s %v", i, res.Status, res.Err)
			}
			a, err := qlogana.Analyze(res.Qlog)
			if err != nil {
				b.Fatal(err)
			}
			if i == 0 {
				warm = append(warm, delays(a))
			} else {
				meas = append(meas, delays(a))
			}
		}
	}
	for _, x := range []struct {
		name string
		v    []float64
	}{{"warm", warm}, {"meas", meas}} {
		slices.Sort(x.v)
		b.ReportMetric(x.v[len(x.v)/2], x.name+"-p50-delays")
		b.ReportMetric(x.v[len(x.v)-1], x.name+"-max-delays")
	}
}

func TestAnalyzeNormal(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", QUICDelay: delay})
	a, r := pairResults(t, s)
	check(t, "warm-up", a[0], qlogana.Cause1RTT, 1)
	check(t, "measured", a[1], qlogana.Cause1RTT, 1)
	if !a[0].TokenReceived || *r[0].TokenUsed || !*r[1].TokenUsed {
		t.Errorf("tokens: warm-up received %v used %v, measured used %v", a[0].TokenReceived, *r[0].TokenUsed, *r[1].TokenUsed)
	}
}

// TestAnalyzeSplitFlight: a server whose first flight leaves as two datagrams 12 ms apart
// (one RTT is 15 ms here), with our ACK of the first in between, took one round trip.
func TestAnalyzeSplitFlight(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", QUICDelay: delay, SplitFlight: 12 * time.Millisecond, ChainBytes: 1200})
	w, m := pair(t, s)
	check(t, "warm-up", w, qlogana.Cause1RTT, 1)
	check(t, "measured", m, qlogana.Cause1RTT, 1)
}

func TestAnalyzeRetry(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", QUICDelay: delay, Retry: true})
	w, m := pair(t, s)
	check(t, "warm-up", w, qlogana.CauseRetry, 2)
	if !w.Retry {
		t.Error("warm-up: no Retry flagged")
	}
	// The NEW_TOKEN token of the warm-up validates the measured connection: no Retry.
	check(t, "measured", m, qlogana.Cause1RTT, 1)
}

func TestAnalyzeVersionNegotiation(t *testing.T) {
	// The server speaks QUIC v2 only; quic-go's client starts with v1 and gets Version
	// Negotiation (RFC 9000 §6), then starts a new connection and a new qlog trace.
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", QUICDelay: delay, QUICVersions: []quic.Version{quic.Version2}})
	a, r := pairResults(t, s)
	check(t, "warm-up", a[0], qlogana.CauseVersionNegotiation, 2)
	if !*r[0].VNSeen || r[0].QUICVersion != uint32(quic.Version2) {
		t.Errorf("warm-up: VN seen %v, version %#x", *r[0].VNSeen, r[0].QUICVersion)
	}
	// The measured connection reuses the negotiated version: no VN.
	check(t, "measured", a[1], qlogana.Cause1RTT, 1)
	if *r[1].VNSeen || r[1].QUICVersion != uint32(quic.Version2) {
		t.Errorf("measured: VN seen %v, version %#x", *r[1].VNSeen, r[1].QUICVersion)
	}
}

func TestAnalyzeAmplification(t *testing.T) {
	cert, err := measuretest.Certificate(8000)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("token-honoured", func(t *testing.T) {
		s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", QUICDelay: delay, Cert: &cert})
		w, m := pair(t, s)
		check(t, "warm-up", w, qlogana.CauseAmplification, 2)
		if !w.AmplificationStall || w.ServerBytesPreAck > 3*w.ClientInitialBytes {
			t.Errorf("warm-up stall %v: server %d bytes for client %d", w.AmplificationStall, w.ServerBytesPreAck, w.ClientInitialBytes)
		}
		check(t, "measured", m, qlogana.Cause1RTT, 1)
	})
	t.Run("token-ignored", func(t *testing.T) {
		s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", QUICDelay: delay, Cert: &cert, IgnoreTokens: true})
		a, r := pairResults(t, s)
		check(t, "warm-up", a[0], qlogana.CauseAmplification, 2)
		check(t, "measured", a[1], qlogana.CauseAmplification, 2)
		if !*r[1].TokenUsed {
			t.Error("measured: the token was not presented")
		}
	})
}

func TestAnalyzeLoss(t *testing.T) {
	// Drop the server's first datagram: the client's Initial is retransmitted on PTO.
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.3", QUICDelay: delay, DropDatagrams: []int{0}})
	m, _ := measure.For(measure.DoQ)
	res := m.Measure(context.Background(), &measure.Request{Addr: s.DoQ, Peer: measure.NewPeer(), KeyShare: measure.KeyShareX25519, Timeout: 3 * time.Second})
	if res.Status != measure.StatusOK {
		t.Fatalf("%s %v", res.Status, res.Err)
	}
	a, err := qlogana.Analyze(res.Qlog)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cause %s trips %d retrans %d lost %d", a.Cause, a.RoundTrips, a.Retransmissions, a.LostPackets)
	if !a.Loss || a.Cause != qlogana.CauseLoss {
		t.Errorf("loss %v cause %s", a.Loss, a.Cause)
	}
}

func TestAnalyzeRejectsEmpty(t *testing.T) {
	for _, in := range []string{"", "\x1e{}", "\x1enot json", "\x1e{\"time\":1,\"name\":\"transport:packet_sent\",\"data\":5}"} {
		if _, err := qlogana.Analyze([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func FuzzAnalyze(f *testing.F) {
	f.Add([]byte("\x1e{\"time\":0.3,\"name\":\"transport:packet_sent\",\"data\":{\"header\":{\"packet_type\":\"initial\",\"token\":{\"raw\":{}}},\"raw\":{\"length\":1280},\"frames\":[{\"frame_type\":\"crypto\",\"offset\":0,\"length\":264}]}}\n" +
		"\x1e{\"time\":1.2,\"name\":\"transport:packet_received\",\"data\":{\"header\":{\"packet_type\":\"retry\"},\"raw\":{\"length\":100}}}\n" +
		"\x1e{\"time\":1.5,\"name\":\"quic:connection_state_updated\",\"data\":{\"new\":\"handshake_complete\"}}\n" +
		"\x1e{\"time\":1.6,\"name\":\"recovery:metrics_updated\",\"data\":{\"min_rtt\":0.8}}\n"))
	if b, err := os.ReadFile("testdata/normal.sqlog"); err == nil {
		f.Add(b)
		f.Add(append(cutRecords(b, 20), qlogana.TruncatedRecord(3.5, 4096, 10)...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := qlogana.Analyze(b)
		if err == nil && a.Cause == "" {
			t.Fatal("analysis without a cause")
		}
	})
}

// cutRecords returns the first n records of a JSON-SEQ qlog.
func cutRecords(b []byte, n int) []byte {
	i, seen := 0, 0
	for ; i < len(b); i++ {
		if b[i] == 0x1e {
			if seen == n {
				break
			}
			seen++
		}
	}
	return b[:i]
}

func TestAnalyzeTruncated(t *testing.T) {
	full, err := os.ReadFile("testdata/normal.sqlog")
	if err != nil {
		t.Fatal(err)
	}
	whole, err := qlogana.Analyze(full)
	if err != nil || whole.Truncated || whole.HandshakeNS <= 0 {
		t.Fatalf("whole qlog: %+v, %v", whole, err)
	}
	records := bytes.Count(full, []byte{0x1e})
	// Cut after the handshake (before the last record): the same explanation, and the
	// mark; cut before it completed: no explanation (cause unknown), and the mark.
	var completeAt int
	for n := 1; n <= records; n++ {
		if bytes.Contains(cutRecords(full, n), []byte(`"handshake_complete"`)) {
			completeAt = n
			break
		}
	}
	if completeAt == 0 || completeAt == records {
		t.Fatalf("handshake_complete at record %d of %d", completeAt, records)
	}
	mark := qlogana.TruncatedRecord(12.5, 4096, 7)
	after, err := qlogana.Analyze(append(cutRecords(full, records-1), mark...))
	if err != nil {
		t.Fatal(err)
	}
	if !after.Truncated || after.Cause != whole.Cause || after.HandshakeNS != whole.HandshakeNS || after.RoundTrips != whole.RoundTrips {
		t.Errorf("cut after the handshake: %+v, want %+v and truncated", after, whole)
	}
	before, err := qlogana.Analyze(append(cutRecords(full, completeAt-1), mark...))
	if err != nil {
		t.Fatal(err)
	}
	if !before.Truncated || before.Cause != qlogana.CauseUnknown || before.HandshakeNS != 0 || before.OneRTT {
		t.Errorf("cut before the handshake completed: %+v, want cause unknown, truncated", before)
	}
	// Every cut, mid-record included, with or without the mark: no crash, no analysis
	// without a cause.
	for i := 0; i <= len(full); i += 97 {
		for _, in := range [][]byte{full[:i], append(append([]byte(nil), full[:i]...), mark...)} {
			if a, err := qlogana.Analyze(in); err == nil && a.Cause == "" {
				t.Fatalf("cut at %d: analysis without a cause", i)
			}
		}
	}
}
