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

// ArrivalsEvent names doqscan's record of when the long-header datagrams of an exchange
// reached the client's host (the kernel's receive timestamps, internal/kstamp), by the
// checksum quic-go's qlog gives each received long-header packet
// (datagram_payload_checksum): quic-go's own packet_received times are when it got to
// the packets, which a busy client delays. Parse times those packets by their arrival.
// Its data holds arrivals: [{"checksum": N, "unix_ns": T}, ...].
const ArrivalsEvent = "doqscan:datagram_arrivals"

// Arrival is one datagram's arrival for ArrivalsRecord.
type Arrival struct {
	Checksum uint32
	At       time.Time
}

// arrivalJSON is an Arrival as ArrivalsRecord writes it.
type arrivalJSON struct {
	Checksum uint32 `json:"checksum"`
	UnixNS   int64  `json:"unix_ns"`
}

// ArrivalsRecord is the JSON-SEQ record of an ArrivalsEvent (time 0: it applies to the
// whole qlog).
func ArrivalsRecord(arrivals []Arrival) []byte {
	list := make([]arrivalJSON, len(arrivals))
	for i, a := range arrivals {
		list[i] = arrivalJSON{a.Checksum, a.At.UnixNano()}
	}
	b, _ := json.Marshal(struct {
		Time float64 `json:"time"`
		Name string  `json:"name"`
		Data any     `json:"data"`
	}{0, ArrivalsEvent, map[string]any{"arrivals": list}})
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
	RTTNS              int64 // the RTT the analysis used (Options.RTTNS, else the qlog's min_rtt capped by firstAnswer)
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

	lostAt []int64 // when quic-go declared our packets lost, before the handshake completed
}

// lostBefore reports whether quic-go had declared a packet of ours lost at or before t.
func (a *Analysis) lostBefore(t int64) bool {
	for _, l := range a.lostAt {
		if l <= t {
			return true
		}
	}
	return false
}

// Flight is one server flight: packets received together.
type Flight struct {
	StartNS, EndNS int64
	Bytes          int
	HandshakeCrypt bool // carries Handshake-level CRYPTO
	Types          []string

	last    int     // bytes of the flight's last datagram
	lastSum *uint32 // its datagram_payload_checksum (nil: not logged)
}

type packetData struct {
	Header struct {
		PacketType   string          `json:"packet_type"`
		PacketNumber *int64          `json:"packet_number"`
		Version      string          `json:"version"`
		Token        json.RawMessage `json:"token"`
	} `json:"header"`
	Raw struct {
		Length int `json:"length"`
	} `json:"raw"`
	// Checksum is quic-go's datagram_payload_checksum of a received long-header packet:
	// CRC-32C of the datagram that carried it.
	Checksum *uint32 `json:"datagram_payload_checksum"`
	Frames   []struct {
		FrameType string `json:"frame_type"`
		Offset    int64  `json:"offset"`
		Length    int64  `json:"length"`
	} `json:"frames"`
}

type packet struct {
	t      int64
	sum    *uint32 // received long-header packet: its datagram's checksum
	pn     int64   // packet number, -1 when the qlog gives none
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
	// completedBy is the datagram_payload_checksum of the packet whose processing
	// completed the handshake (the last packet received before the handshake_complete
	// state update, in record order); hasCompletedBy: the qlog names one.
	completedBy    uint32
	hasCompletedBy bool

	// Close is how the connection ended (the last trace's connection_closed event), nil
	// if the qlog does not say.
	Close *Close

	server ServerView
}

// CompletedBy returns the checksum (CRC-32C of the UDP payload, as quic-go's qlog gives
// it) of the datagram whose packet completed the handshake: the server's flight's last
// datagram that the client needed, whenever the client got to it. false when the
// handshake did not complete or the qlog does not give the checksum.
func (tr *Trace) CompletedBy() (uint32, bool) { return tr.completedBy, tr.hasCompletedBy }

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

// AgainstPathRTT explains the trace's handshake again against a path RTT measured apart
// from the qlog (an RTT probe of the same address and port: measure's hourly round,
// conncheck) and returns that analysis: the flight grouping is relative to the RTT, and
// the qlog's own (min_rtt, the first answer) grows with the client's load. It returns
// prev, the analysis against the qlog's own RTT, when rttNS is not positive, tr is nil,
// or the new analysis explains no completed handshake.
func (tr *Trace) AgainstPathRTT(prev *Analysis, rttNS int64) *Analysis {
	if tr == nil || rttNS <= 0 {
		return prev
	}
	if a, err := tr.Analyze(Options{RTTNS: rttNS}); err == nil && a.HandshakeNS > 0 {
		return a
	}
	return prev
}

// Parse reads a client qlog in any serialisation readEvents knows (JSON-SEQ, draft-02
// NDJSON, JSON, gzip of any), one or more traces. It never panics on any input.
func Parse(qlog []byte) (*Trace, error) {
	var (
		pkts           []packet
		completeNS     int64 = -1
		minRTT         float64
		lostAt         []int64
		haveMinRTT     bool
		truncated      bool
		firstRef       time.Time
		offset         int64
		lastRecvSum    *uint32 // the checksum of the last packet received, in record order
		completedBy    uint32
		hasCompletedBy bool
		version        string // the last long-header version the server used
		chosen         string // version_information's chosen_version
		offered        string // the version of our last long-header packet
		closed         *Close
		arrivals       = map[uint32]int64{} // checksum -> unix ns (ArrivalsEvent)
		server         serverReader
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
			if e.name == "transport:packet_received" {
				server.received(e.data)
			} else {
				server.sent(e.data)
			}
			var d packetData
			if err := json.Unmarshal(e.data, &d); err != nil {
				return nil
			}
			p := packet{t: t, sent: e.name == "transport:packet_sent", ptype: d.Header.PacketType, length: d.Raw.Length, pn: -1}
			if d.Header.PacketNumber != nil {
				p.pn = *d.Header.PacketNumber
			}
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
			if !p.sent {
				lastRecvSum, p.sum = d.Checksum, d.Checksum
			}
			pkts = append(pkts, p)
		case "transport:parameters_set":
			server.parameters(e.data)
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
				if lastRecvSum != nil {
					completedBy, hasCompletedBy = *lastRecvSum, true
				}
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
		case ArrivalsEvent:
			var d struct {
				Arrivals []arrivalJSON `json:"arrivals"`
			}
			if json.Unmarshal(e.data, &d) == nil {
				for _, a := range d.Arrivals {
					if _, seen := arrivals[a.Checksum]; !seen && a.UnixNS > 0 {
						arrivals[a.Checksum] = a.UnixNS
					}
				}
			}
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
	// A received packet whose datagram's arrival is known is timed by it, on the first
	// trace's time line (its reference is wall-clock time, as the arrivals are).
	if len(arrivals) > 0 && !firstRef.IsZero() {
		for i := range pkts {
			if p := &pkts[i]; p.sum != nil {
				if at, ok := arrivals[*p.sum]; ok && at-firstRef.UnixNano() <= p.t {
					p.t = at - firstRef.UnixNano()
				}
			}
		}
	}
	sort.SliceStable(pkts, func(i, j int) bool { return pkts[i].t < pkts[j].t })
	for _, v := range []string{chosen, offered} {
		if version == "" {
			version = v
		}
	}
	tr := &Trace{pkts: pkts, completeNS: completeNS, minRTT: minRTT, haveMinRTT: haveMinRTT, lostAt: lostAt, Source: src,
		truncated: truncated || src.Truncated, completedBy: completedBy, hasCompletedBy: hasCompletedBy, Close: closed,
		server: server.v}
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
			a.lostAt = append(a.lostAt, t)
		}
	}
	if opt.RTTNS > 0 {
		a.RTTNS = opt.RTTNS
	} else if haveMinRTT && minRTT < 1e9 {
		a.RTTNS = int64(minRTT * 1e6)
		// quic-go takes its RTT samples when it reads a packet, which on a busy client is
		// long after the packet arrived; the server's first answer cannot arrive sooner
		// than one RTT after our first packet left, and its time here is the kernel's
		// arrival stamp where one was recorded. The smaller of the two still bounds the
		// RTT from above, and a min_rtt grown by the client's own delay no longer hides
		// a server's pause of a few milliseconds.
		if first := firstAnswer(pkts); first > 0 && first < a.RTTNS {
			a.RTTNS = first
		}
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
//
// A server flight is what the server sent without waiting for us. The server's
// packets may reach us spread out (its own processing, pacing, a loaded host: a
// datagram of the flight can even arrive after an ACK of ours), and our client's timers
// may send probes in between: neither makes a round trip. A received packet that moves
// the handshake on starts a new flight only when the server had to wait for something
// we sent (newFlight), or retransmits CRYPTO it had sent (its own loss recovery).
func (a *Analysis) scan(pkts []packet, completeNS int64) {
	firstInitial := true
	sentCrypto := map[string]bool{}
	recvCrypto := map[string]bool{}
	sentEnd := map[string]int64{} // per packet type: the end of the CRYPTO data we sent
	// The server's CRYPTO stream per packet type: where it ends so far, and since when a
	// hole below that end is open (data beyond it arrived first). A hole filled at least
	// gap later was lost and sent again (the server learnt of it from our ACK, or its
	// timer fired); one filled sooner was reordering.
	recvEnd := map[string]int64{}
	holeSince := map[string]int64{}
	recovered := false // the server resent CRYPTO it had lost
	// serverLost: the first Initial the server sent us in an attempt is not its first
	// (a packet number above 0: every stack numbers from 0, RFC 9000 §12.3 leaves room
	// but none uses it), so an earlier one never arrived.
	serverLost, seenServerInitial := false, false
	gap := int64(float64(a.RTTNS) * flightGapRatio)
	var sends []send // our packets of the current attempt
	flightSends := 0 // index into sends: the first sent since the current flight began
	lastProgress := int64(math.MinInt64)
	preFlightBytes, serverBytes := 0, 0 // the server's bytes before the attempt's first flight, in the attempt
	attemptClientBytes, attemptStartFlight, attemptFlights := 0, 0, 0
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
		newCrypto, newRecv, filled := false, false, false
		for _, c := range p.crypto {
			k := fmt.Sprintf("%s/%d", p.ptype, c[0])
			m := recvCrypto
			if p.sent {
				m = sentCrypto
			}
			dup := m[k]
			if dup {
				a.Retransmissions++
			}
			newRecv = newRecv || (!p.sent && !dup)
			m[k] = true
			end := c[0] + c[1]
			switch {
			case p.sent:
				if end > sentEnd[p.ptype] {
					sentEnd[p.ptype], newCrypto = end, true
				}
			case c[0] > recvEnd[p.ptype]:
				if _, open := holeSince[p.ptype]; !open {
					holeSince[p.ptype] = p.t
				}
			case c[0] < recvEnd[p.ptype] && !dup:
				if since, open := holeSince[p.ptype]; open && p.t-since >= gap {
					filled = true
				}
			}
			if !p.sent && end > recvEnd[p.ptype] {
				recvEnd[p.ptype] = end
			}
		}
		recovered = recovered || filled
		if !p.sent && p.ptype == "version_negotiation" {
			a.VersionNegotiation = true
		}
		if !p.sent && p.ptype == "retry" {
			a.Retry = true
		}
		if p.sent {
			sends = append(sends, send{t: p.t, length: p.length, newCrypto: newCrypto})
			continue
		}
		if p.ptype == "initial" && !seenServerInitial {
			seenServerInitial = true
			serverLost = serverLost || p.pn > 0
		}
		serverBytes += p.length
		restart := p.ptype == "retry" || p.ptype == "version_negotiation"
		// A packet moves the handshake on with CRYPTO data we had not had (a copy the
		// server sent again on its timer, the original having arrived, does not), or by
		// starting a new attempt.
		progress := newRecv || restart
		if progress {
			var starts bool
			switch {
			case attemptFlights == 0:
				// The attempt's first flight. Its budget is what reached the server
				// before it left (budgetBytes).
				attemptClientBytes = budgetBytes(sends, p.t, gap)
				starts = true
			case restart:
				starts = true
			case filled:
				starts = p.t-lastProgress >= gap
			default:
				starts = a.newFlight(p.t, sends[flightSends:], gap, p.t-lastProgress, serverBytes-p.length, bytesUntil(sends, lastProgress-gap))
			}
			if starts {
				a.Flights = append(a.Flights, Flight{StartNS: p.t, Bytes: preFlightBytes})
				preFlightBytes = 0
				flightSends = len(sends)
				attemptFlights++
			}
		}
		if len(a.Flights) == 0 || attemptFlights == 0 {
			preFlightBytes += p.length
			continue
		}
		f := &a.Flights[len(a.Flights)-1]
		f.EndNS, f.Bytes = p.t, f.Bytes+p.length
		if p.sum != nil && f.lastSum != nil && *p.sum == *f.lastSum {
			f.last += p.length // coalesced into the same datagram
		} else {
			f.last, f.lastSum = p.length, p.sum
		}
		f.Types = appendUnique(f.Types, p.ptype)
		if p.ptype == "handshake" && len(p.crypto) > 0 {
			f.HandshakeCrypt = true
		}
		if progress {
			lastProgress = p.t
		}
		if restart {
			// A new attempt starts: Initial state and the budget start over
			// (RFC 9000 §6.2, §17.2.5.2). The new attempt resends the ClientHello from
			// offset 0: not a retransmission.
			attemptClientBytes, attemptStartFlight, attemptFlights = 0, len(a.Flights), 0
			sends, flightSends, preFlightBytes, serverBytes = nil, 0, 0, 0
			seenServerInitial = false
			clear(sentCrypto)
			clear(recvCrypto)
			clear(sentEnd)
			clear(recvEnd)
			clear(holeSince)
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
	// CRYPTO (the rest of its flight, released by our ACK). The budget is 3x what we had
	// sent by then (at least gap before the flight's end reached us): the ACKs of our
	// first flight raise it while the server sends, which on a short path lets a big
	// flight run past 3x our first datagram before it stops. A server may start a
	// datagram while under its budget and end it above (quic-go sends while its bytes
	// sent are below 3x those received): the flight's last datagram must have begun
	// within the budget, the whole flight may pass it by that datagram.
	cum := 0
	for k := 0; k+1 < len(att); k++ {
		cum += att[k].Bytes
		client := budgetBytes(sends, att[k].EndNS, gap)
		budget := AmplificationFactor * client
		if client == 0 || cum-att[k].last > budget+amplificationSlack {
			continue
		}
		if float64(cum) >= stallFillRatio*float64(budget) && att[k+1].HandshakeCrypt {
			a.AmplificationStall = true
			a.ClientInitialBytes, a.ServerBytesPreAck = client, cum
			a.StallNS = att[k+1].StartNS - att[k].EndNS
			break
		}
	}
	// Loss: quic-go declared a packet of ours lost, the server's CRYPTO filled a hole
	// late (it resent what the path lost), or its first Initial to arrive was not its
	// first. Retransmissions whose originals arrived are not evidence: a probe our
	// client sends on its timer while the server's flight is on its way (a quick ACK
	// gave a small RTT sample, the first PTO on a long path), or a copy the server sends
	// on its own timer while our ACK is on its way, costs nothing.
	a.Loss = a.LostPackets > 0 || recovered || serverLost
}

// send is a packet we sent: when, its length, and whether it carried CRYPTO data we had
// not sent before (a ClientHello after a HelloRetryRequest, our Finished).
type send struct {
	t         int64
	length    int
	newCrypto bool
}

// bytesUntil is the length of the sends at or before t.
func bytesUntil(sends []send, t int64) int {
	n := 0
	for _, s := range sends {
		if s.t <= t {
			n += s.length
		}
	}
	return n
}

// firstAnswer is the time from our first packet to the first packet we received after
// it (0: none).
func firstAnswer(pkts []packet) int64 {
	sent := int64(-1)
	for _, p := range pkts {
		switch {
		case p.sent && sent < 0:
			sent = p.t
		case !p.sent && sent >= 0:
			return max(p.t-sent, 0)
		}
	}
	return 0
}

// budgetBytes is what of ours had reached the server when it sent a packet that reached
// us at t: what we sent at least gap before t (a probe sent just before the packet
// arrived came too late), and every packet carrying CRYPTO data we had not sent before,
// sent before t: the server answers our ClientHello only once it has all of it, so its
// answer proves the Initials that carried it arrived (a hybrid key share's second
// Initial leaves a millisecond after the first). Their timing cannot be trusted to gap:
// on a busy client the qlog's min_rtt, taken at user-space receive times, can exceed
// twice the interval between our send and the answer's kernel arrival stamp.
func budgetBytes(sends []send, t, gap int64) int {
	n := 0
	for _, s := range sends {
		if s.t <= t-gap || (s.newCrypto && s.t <= t) {
			n += s.length
		}
	}
	return n
}

// newFlight reports whether a packet that moves the handshake on, received at t, began a
// new server flight: the server waited for one of the packets we sent since the current
// flight began (since: those packets), at least gap before t (it cannot answer sooner),
// because that packet carried CRYPTO data it needed, or because quic-go had declared
// one of our packets lost (what we sent replaced what the server never got), or because
// it had used its anti-amplification budget (serverBytes, the attempt's bytes before this
// packet, reached stallFillRatio of 3x clientBytes, our bytes that reached it before its
// last packet; our packet raised the budget) and went quiet for at least gap (idle: since
// its previous packet that moved the handshake on); a server that goes on sending at its
// budget's edge as our ACKs come in never waited.
func (a *Analysis) newFlight(t int64, since []send, gap, idle int64, serverBytes, clientBytes int) bool {
	for _, s := range since {
		if t-s.t < gap {
			break
		}
		if s.newCrypto || a.lostBefore(t) {
			return true
		}
		if idle >= gap && clientBytes > 0 && float64(serverBytes) >= stallFillRatio*float64(AmplificationFactor*clientBytes) {
			return true
		}
	}
	return false
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
