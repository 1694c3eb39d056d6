// Package qlogana explains a QUIC handshake from the client's qlog (JSON-SEQ, as
// written by quic-go's qlogwriter, or the draft-02 NDJSON/JSON of older quic-go, gzip
// or not: read.go normalises them into one event stream): how many round trips it took and why — Version
// Negotiation (RFC 9000 §6), Retry (RFC 9000 §8.1.2), an anti-amplification stall (the
// server stopped at 3x the client's bytes, RFC 9000 §8.1, and waited for more from the
// client before sending the rest of its flight), or loss and retransmission.
//
// quic-go has no qlog event for "blocked by the amplification limit", so the stall is
// inferred from the packet exchange: the server's bytes in its first flight are close to
// three times what we sent before it, and more Handshake CRYPTO arrives one round trip
// later, after our ACK.
package qlogana

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// AmplificationFactor is the server's budget before address validation (RFC 9000 §8.1).
const AmplificationFactor = 3

// stallFillRatio: a first flight of at least this fraction of the 3x budget counts as
// "the server used its budget" (packets do not fill the budget to the byte).
const stallFillRatio = 0.75

// flightGapRatio: a received packet starts a new server flight when we sent something
// since the previous one and at least this fraction of an RTT passed.
const flightGapRatio = 0.5

// maxRecords bounds the work on a hostile or huge input.
const maxRecords = 1 << 20

// recordSeparator separates JSON-SEQ records (RFC 7464 §2).
const recordSeparator = 0x1e

// Cause classes, as in schema.sql handshake_analyses.cause.
const (
	Cause1RTT               = "1rtt"
	CauseRetry              = "retry"
	CauseVersionNegotiation = "version-negotiation"
	CauseAmplification      = "amplification"
	CauseLoss               = "loss"
	CauseMultiple           = "multiple"
	CauseUnknown            = "unknown"
)

// TruncatedEvent names the last record of a qlog that its writer cut at a size bound
// (doqscan's own event, in its own namespace as qlog allows): the events after it are
// lost. Its data holds limit_bytes and dropped_events.
const TruncatedEvent = "doqscan:qlog_truncated"

// TruncatedRecord is the JSON-SEQ record that ends a truncated qlog: at is its time (ms,
// relative to the last trace's reference time), limit the bound, dropped the events lost.
func TruncatedRecord(at float64, limit int, dropped int64) []byte {
	if math.IsNaN(at) || math.IsInf(at, 0) || at < 0 {
		at = 0
	}
	b, _ := json.Marshal(struct {
		Time float64 `json:"time"`
		Name string  `json:"name"`
		Data any     `json:"data"`
	}{at, TruncatedEvent, map[string]int64{"limit_bytes": int64(limit), "dropped_events": dropped}})
	return append(append([]byte{recordSeparator}, b...), '\n')
}

// ErrNoHandshake is returned when the qlog holds no packet exchange at all.
var ErrNoHandshake = errors.New("qlog holds no QUIC packets")

// Options tune an analysis.
type Options struct {
	// RTTNS is the path RTT measured separately (the VN probe); 0: take the smallest
	// RTT sample from the qlog itself.
	RTTNS int64
}

// Analysis is what the qlog says about the handshake.
type Analysis struct {
	HandshakeNS        int64 // first packet sent -> handshake complete (0: never completed)
	HandshakeComplete  bool  // the qlog shows the handshake completing
	RTTNS              int64 // the RTT the analysis used (Options.RTTNS or the qlog's min_rtt)
	RoundTrips         int   // server flights until the handshake completed
	OneRTT             bool
	VersionNegotiation bool
	Retry              bool
	AmplificationStall bool
	Loss               bool
	TokenUsed          bool // our first Initial carried a token (if the qlog logs sent tokens; quic-go does not)
	TokenReceived      bool // a NEW_TOKEN frame arrived
	ClientInitialBytes int  // our bytes before the server's first flight (final attempt)
	ServerBytesPreAck  int  // the server's bytes in its first flight (final attempt)
	StallNS            int64
	LostPackets        int
	Retransmissions    int
	Cause              string
	Flights            []Flight
	// Truncated: the qlog was cut at a size bound (TruncatedEvent). What it holds is
	// analysed as usual; a handshake that does not complete within it is not explained
	// (Cause unknown, HandshakeNS 0), as a lost end could hold any cause.
	Truncated bool
}

// Flight is one server flight: packets received together.
type Flight struct {
	StartNS, EndNS int64
	Bytes          int
	HandshakeCrypt bool // carries Handshake-level CRYPTO
	Types          []string
}

type packetData struct {
	Header struct {
		PacketType string          `json:"packet_type"`
		Version    string          `json:"version"`
		Token      json.RawMessage `json:"token"`
	} `json:"header"`
	Raw struct {
		Length int `json:"length"`
	} `json:"raw"`
	Frames []struct {
		FrameType string `json:"frame_type"`
		Offset    int64  `json:"offset"`
		Length    int64  `json:"length"`
	} `json:"frames"`
}

type packet struct {
	t      int64
	sent   bool
	ptype  string
	length int
	token  bool
	crypto [][2]int64 // offset, length
	frames []string
}

// Trace is a parsed client qlog: what Analyze needs of it, to explain the same
// handshake again (e.g. against an RTT sample taken later) without parsing the JSON again.
type Trace struct {
	// Source says what the input was (serialisation, ODCID, truncation).
	Source Source
	// QUICVersion is the version of the server's last long-header packet, else the
	// version_information's chosen one, else the one our Initials carried (no reply);
	// 0 if the qlog names none.
	QUICVersion uint32
	pkts        []packet // by time
	completeNS  int64
	minRTT      float64
	haveMinRTT  bool
	lostAt      []int64
	truncated   bool // cut: a TruncatedEvent record, or the input ended inside a record

	// Close is how the connection ended (the last trace's connection_closed event), nil
	// if the qlog does not say.
	Close *Close
}

// Truncated reports whether the qlog was cut: it ends with a TruncatedEvent record
// (its writer reached its bound) or inside a record (cut by a crash or a copy).
func (tr *Trace) Truncated() bool { return tr.truncated }

// Analyze parses a client qlog and explains its handshake. It never panics on any input.
func Analyze(qlog []byte, opts ...Options) (*Analysis, error) {
	t, err := Parse(qlog)
	if err != nil {
		return nil, err
	}
	return t.Analyze(opts...)
}

// Parse reads a client qlog in any serialisation readEvents knows (JSON-SEQ, draft-02
// NDJSON, JSON, gzip of any), one or more traces. It never panics on any input.
func Parse(qlog []byte) (*Trace, error) {
	var (
		pkts       []packet
		completeNS int64 = -1
		minRTT     float64
		lostAt     []int64
		haveMinRTT bool
		truncated  bool
		firstRef   time.Time
		offset     int64
		version    string // the last long-header version the server used
		chosen     string // version_information's chosen_version
		offered    string // the version of our last long-header packet
		closed     *Close
	)
	src, err := readEvents(qlog, func(e *event) error {
		if e.header {
			// quic-go starts a new trace per connection attempt (after Version
			// Negotiation); each trace's times are relative to its own wall-clock
			// reference, so later traces are shifted onto the first one's time line.
			if !e.ref.IsZero() {
				if firstRef.IsZero() {
					firstRef = e.ref
				}
				if d := e.ref.Sub(firstRef); d >= 0 && d < time.Hour {
					offset = d.Nanoseconds()
				}
			}
			return nil
		}
		t := int64(e.ms*1e6) + offset
		switch e.name {
		case "transport:packet_sent", "transport:packet_received":
			var d packetData
			if err := json.Unmarshal(e.data, &d); err != nil {
				return nil
			}
			p := packet{t: t, sent: e.name == "transport:packet_sent", ptype: d.Header.PacketType, length: d.Raw.Length}
			p.token = len(d.Header.Token) > 0 && string(d.Header.Token) != "null"
			for _, f := range d.Frames {
				p.frames = append(p.frames, f.FrameType)
				if f.FrameType == "crypto" {
					p.crypto = append(p.crypto, [2]int64{f.Offset, f.Length})
				}
			}
			switch {
			case d.Header.Version == "" || p.ptype == "version_negotiation" || p.ptype == "retry":
			case p.sent:
				offered = d.Header.Version
			default:
				version = d.Header.Version
			}
			pkts = append(pkts, p)
		case "transport:version_information":
			var d struct {
				Chosen string `json:"chosen_version"`
			}
			if json.Unmarshal(e.data, &d) == nil && d.Chosen != "" {
				chosen = d.Chosen
			}
		case "quic:connection_state_updated":
			var d struct {
				New string `json:"new"`
			}
			if json.Unmarshal(e.data, &d) == nil && d.New == "handshake_complete" && completeNS < 0 {
				completeNS = t
			}
		case "recovery:metrics_updated":
			var d struct {
				MinRTT *float64 `json:"min_rtt"`
			}
			if json.Unmarshal(e.data, &d) == nil && d.MinRTT != nil && *d.MinRTT > 0 && !math.IsInf(*d.MinRTT, 0) {
				if !haveMinRTT || *d.MinRTT < minRTT {
					minRTT, haveMinRTT = *d.MinRTT, true
				}
			}
		case "transport:connection_closed":
			if c := parseClose(e.data); c != nil {
				closed = c
			}
		case "recovery:packet_lost":
			lostAt = append(lostAt, t)
		case TruncatedEvent:
			truncated = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(pkts) == 0 {
		if src.Traces == 0 && src.BadRecords > 0 {
			return nil, ErrNotQlog
		}
		return nil, ErrNoHandshake
	}
	sort.SliceStable(pkts, func(i, j int) bool { return pkts[i].t < pkts[j].t })
	for _, v := range []string{chosen, offered} {
		if version == "" {
			version = v
		}
	}
	tr := &Trace{pkts: pkts, completeNS: completeNS, minRTT: minRTT, haveMinRTT: haveMinRTT, lostAt: lostAt, Source: src,
		truncated: truncated || src.Truncated, Close: closed}
	if v, err := strconv.ParseUint(strings.TrimPrefix(version, "0x"), 16, 32); err == nil && v != 0 {
		tr.QUICVersion = uint32(v)
	}
	return tr, nil
}

// Analyze explains the trace's handshake (see Options).
func (tr *Trace) Analyze(opts ...Options) (*Analysis, error) {
	var opt Options
	if len(opts) > 0 {
		opt = opts[0]
	}
	pkts, completeNS, minRTT, haveMinRTT, lostAt := tr.pkts, tr.completeNS, tr.minRTT, tr.haveMinRTT, tr.lostAt
	a := &Analysis{Truncated: tr.truncated}
	for _, t := range lostAt {
		if completeNS < 0 || t <= completeNS { // loss after the handshake does not explain it
			a.LostPackets++
		}
	}
	if opt.RTTNS > 0 {
		a.RTTNS = opt.RTTNS
	} else if haveMinRTT && minRTT < 1e9 {
		a.RTTNS = int64(minRTT * 1e6)
	}
	start := int64(-1)
	for _, p := range pkts {
		if p.sent {
			start = p.t
			break
		}
	}
	a.HandshakeComplete = completeNS >= 0
	if start >= 0 && completeNS >= start {
		a.HandshakeNS = completeNS - start
	}
	a.scan(pkts, completeNS)
	a.classify()
	if a.Truncated && completeNS < 0 {
		a.Cause, a.OneRTT = CauseUnknown, false
	}
	return a, nil
}

// scan walks the packets: flags, retransmissions, flights and the stall test.
func (a *Analysis) scan(pkts []packet, completeNS int64) {
	firstInitial := true
	clientRetrans, serverRetrans := 0, 0
	sentCrypto := map[string]bool{}
	recvCrypto := map[string]bool{}
	gap := int64(float64(a.RTTNS) * flightGapRatio)
	sentSince := true
	lastProgress := int64(math.MinInt64)
	preFlightBytes := 0
	attemptClientBytes, attemptStartFlight := 0, 0
	attemptFirstSend := int64(-1)
	seenRecvInAttempt := false
	for _, p := range pkts {
		if p.sent && p.ptype == "initial" && firstInitial {
			a.TokenUsed, firstInitial = p.token, false
		}
		for _, f := range p.frames {
			if !p.sent && f == "new_token" {
				a.TokenReceived = true
			}
		}
		if completeNS >= 0 && p.t > completeNS {
			continue // what happens after the handshake completed does not explain it
		}
		for _, c := range p.crypto {
			k := fmt.Sprintf("%s/%d", p.ptype, c[0])
			m := recvCrypto
			if p.sent {
				m = sentCrypto
			}
			if m[k] {
				a.Retransmissions++
				if p.sent {
					clientRetrans++
				} else {
					serverRetrans++
				}
			}
			m[k] = true
		}
		if !p.sent && p.ptype == "version_negotiation" {
			a.VersionNegotiation = true
		}
		if !p.sent && p.ptype == "retry" {
			a.Retry = true
		}
		if p.sent {
			sentSince = true
			// The budget of the server's first flight is what our first burst gave it.
			// A PTO probe sent later (on a path longer than the client's initial PTO,
			// ~200 ms in quic-go) raises the budget only after the first flight left.
			if attemptFirstSend < 0 {
				attemptFirstSend = p.t
			}
			if !seenRecvInAttempt && (gap <= 0 || p.t-attemptFirstSend < gap) {
				attemptClientBytes += p.length
			}
			continue
		}
		// Only packets that move the handshake on (CRYPTO, Retry, VN) start a flight: a
		// server's ACK-only reply to our first Initial (two Initials with a hybrid key
		// share) belongs to the flight that answers the ClientHello.
		progress := len(p.crypto) > 0 || p.ptype == "retry" || p.ptype == "version_negotiation"
		if progress && (len(a.Flights) == 0 || (sentSince && p.t-lastProgress >= gap && p.t > lastProgress)) {
			a.Flights = append(a.Flights, Flight{StartNS: p.t, Bytes: preFlightBytes})
			preFlightBytes = 0
		}
		if len(a.Flights) == 0 {
			preFlightBytes += p.length
			continue
		}
		f := &a.Flights[len(a.Flights)-1]
		f.EndNS, f.Bytes = p.t, f.Bytes+p.length
		f.Types = appendUnique(f.Types, p.ptype)
		if p.ptype == "handshake" && len(p.crypto) > 0 {
			f.HandshakeCrypt = true
		}
		if progress {
			lastProgress, sentSince = p.t, false
		}
		seenRecvInAttempt = true
		if p.ptype == "retry" || p.ptype == "version_negotiation" {
			// A new attempt starts: Initial state and the budget start over
			// (RFC 9000 §6.2, §17.2.5.2).
			attemptClientBytes, attemptStartFlight, seenRecvInAttempt, preFlightBytes = 0, len(a.Flights), false, 0
			attemptFirstSend = -1
			sentSince = true
			// The new attempt resends the ClientHello from offset 0: not a retransmission.
			clear(sentCrypto)
			clear(recvCrypto)
		}
	}
	a.RoundTrips = len(a.Flights)
	// The stall test runs on the final attempt's first two flights.
	att := a.Flights[min(attemptStartFlight, len(a.Flights)):]
	a.ClientInitialBytes = attemptClientBytes
	if len(att) > 0 {
		a.ServerBytesPreAck = att[0].Bytes
	}
	// A stall: at some flight boundary of the final attempt, everything the server had
	// sent so far is about its 3x budget, and the next flight carries more Handshake
	// CRYPTO (the rest of its first flight, released by our ACK). Usually the boundary
	// is the first one; a loaded client can split a flight, so every boundary is tried.
	budget := AmplificationFactor * attemptClientBytes
	cum := 0
	for k := 0; k+1 < len(att) && attemptClientBytes > 0; k++ {
		cum += att[k].Bytes
		if cum > budget+amplificationSlack {
			break
		}
		if float64(cum) >= stallFillRatio*float64(budget) && att[k+1].HandshakeCrypt {
			a.AmplificationStall = true
			a.ServerBytesPreAck = cum
			a.StallNS = att[k+1].StartNS - att[k].EndNS
			break
		}
	}
	// Loss: quic-go declared a packet lost, or the server's CRYPTO arrived twice, or we
	// retransmitted and the handshake took more flights than the other causes explain.
	// A retransmission on PTO while the reply is still on its way (the first PTO on a
	// long path fires before the first RTT sample) is spurious and costs nothing.
	explained := 1
	for _, f := range []bool{a.VersionNegotiation, a.Retry, a.AmplificationStall} {
		if f {
			explained++
		}
	}
	a.Loss = a.LostPackets > 0 || serverRetrans > 0 || (clientRetrans > 0 && a.RoundTrips > explained)
}

// amplificationSlack tolerates per-packet accounting differences between the qlog's
// packet lengths and the server's datagram accounting (headers of coalesced packets).
const amplificationSlack = 64

func (a *Analysis) classify() {
	var causes []string
	if a.VersionNegotiation {
		causes = append(causes, CauseVersionNegotiation)
	}
	if a.Retry {
		causes = append(causes, CauseRetry)
	}
	if a.AmplificationStall {
		causes = append(causes, CauseAmplification)
	}
	if a.Loss {
		causes = append(causes, CauseLoss)
	}
	switch {
	case len(causes) == 0 && a.RoundTrips == 1:
		a.Cause, a.OneRTT = Cause1RTT, true
	case len(causes) == 1:
		a.Cause = causes[0]
	case len(causes) > 1:
		a.Cause = CauseMultiple
	default:
		a.Cause = CauseUnknown
	}
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
