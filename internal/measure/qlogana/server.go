package qlogana

import (
	"encoding/json"
	"strings"
)

// ServerView is what a client qlog shows of the server's QUIC stack, as opposed to the
// handshake's timing: the transport parameters it sent, the connection ID length it
// chose, how it packed its first flight, what its first frames were, the tokens it
// gave, and how it closed the connection. Each differs between QUIC implementations
// (their defaults), which is how internal/verify tells them apart. Fields the qlog does
// not show stay at their zero value (nil, empty); none is guessed.
type ServerView struct {
	// Params are the server's transport parameters as quic-go logged them
	// (transport:parameters_set, initiator remote): name -> JSON value. quic-go logs the
	// parameters it knows, after applying RFC 9000's defaults to absent ones (an absent
	// max_udp_payload_size reads 2^62-1); unknown and greased ones are not logged.
	Params map[string]json.RawMessage `json:"params,omitempty"`
	// SCIDLen is the length of the Source Connection ID of the server's first long-header
	// packet (nil: none received).
	SCIDLen *int `json:"scid_len,omitempty"`
	// FirstDatagram is the server's first datagram carrying an Initial or Handshake
	// packet (after any Retry): its payload bytes (the coalesced packets' lengths added
	// up) and the types of its packets in order.
	FirstDatagram *Datagram `json:"first_datagram,omitempty"`
	// InitialFrames are the frame types of the server's first Initial packet, in order
	// (after any Retry).
	InitialFrames []string `json:"initial_frames,omitempty"`
	// OneRTTFrames are the frame types of the server's first 1-RTT packet.
	OneRTTFrames []string `json:"one_rtt_frames,omitempty"`
	// PingOnly counts 1-RTT packets carrying only PING (and PADDING) before the trace
	// ends: path MTU probes (RFC 8899) or keep-alives.
	PingOnly int `json:"ping_only,omitempty"`
	// RetryTokenLen and NewTokenLen are the lengths of the token of the first Retry and
	// of the first NEW_TOKEN frame (nil: none came).
	RetryTokenLen *int `json:"retry_token_len,omitempty"`
	NewTokenLen   *int `json:"new_token_len,omitempty"`
	// RetryODCIDLen is the length of the Destination Connection ID of our Initial that
	// the first Retry answered (the original_destination_connection_id its token
	// carries: quic-go's client picks 8..20 bytes at random); nil without a Retry.
	RetryODCIDLen *int `json:"retry_odcid_len,omitempty"`
	// Close is the server's first CONNECTION_CLOSE frame and ClosePacketLen the length
	// of the packet that carried it (nil: the server sent none).
	Close          *Close `json:"close,omitempty"`
	ClosePacketLen *int   `json:"close_packet_len,omitempty"`
}

// Datagram is one received datagram as the qlog shows it.
type Datagram struct {
	Bytes   int      `json:"bytes"`
	Packets []string `json:"packets"`
}

// maxServerPackets bounds how many received packets the view reads (the first flight
// and a few 1-RTT packets are all it needs).
const maxServerPackets = 64

// serverReader builds a ServerView from the received-packet and parameters events of
// one qlog, in record order.
type serverReader struct {
	v         ServerView
	packets   int
	firstSum  *uint32 // checksum of the first datagram (after any Retry)
	firstOpen bool    // still adding packets to FirstDatagram
	dcidLen   int     // DCID length of the last Initial we sent (sentSeen: one was)
	sentSeen  bool
}

type receivedPacket struct {
	Header struct {
		PacketType string `json:"packet_type"`
		SCID       string `json:"scid"`
		Token      *struct {
			Raw struct {
				Data   string `json:"data"`
				Length *int   `json:"length"`
			} `json:"raw"`
		} `json:"token"`
	} `json:"header"`
	Raw struct {
		Length int `json:"length"`
	} `json:"raw"`
	Checksum *uint32           `json:"datagram_payload_checksum"`
	Frames   []json.RawMessage `json:"frames"`
}

type frameHead struct {
	FrameType string `json:"frame_type"`
	Token     *struct {
		Raw struct {
			Data   string `json:"data"`
			Length *int   `json:"length"`
		} `json:"raw"`
	} `json:"token"`
	ErrorSpace   string          `json:"error_space"`
	Error        json.RawMessage `json:"error"`
	ErrorCode    *uint64         `json:"error_code"`
	Reason       *string         `json:"reason"`
	TriggerFrame json.RawMessage `json:"trigger_frame_type"`
}

// tokenLen is a logged token's length: its raw length if given, else half its hex data.
func tokenLen(data string, length *int) int {
	if length != nil {
		return *length
	}
	return len(data) / 2
}

func (r *serverReader) parameters(data json.RawMessage) {
	if r.v.Params != nil {
		return
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return
	}
	var who string
	for _, k := range []string{"initiator", "owner"} {
		if raw, ok := m[k]; ok {
			_ = json.Unmarshal(raw, &who)
		}
	}
	if who != "remote" {
		return
	}
	delete(m, "initiator")
	delete(m, "owner")
	// Connection IDs and the reset token are per connection, not the stack's.
	for _, k := range []string{"original_destination_connection_id", "initial_source_connection_id",
		"retry_source_connection_id", "stateless_reset_token"} {
		if _, ok := m[k]; ok {
			m[k] = json.RawMessage(`true`) // present
		}
	}
	r.v.Params = m
}

// sent reads the DCID length of an Initial we sent (a stored qlog's packet_sent event).
func (r *serverReader) sent(data json.RawMessage) {
	var p struct {
		Header struct {
			PacketType string `json:"packet_type"`
			DCID       string `json:"dcid"`
		} `json:"header"`
	}
	if json.Unmarshal(data, &p) != nil || p.Header.PacketType != "initial" || !isHex(p.Header.DCID) {
		return
	}
	r.sentInitial(len(p.Header.DCID) / 2)
}

// sentInitial notes the DCID length of an Initial we sent: the one a Retry answers is
// the last sent before it.
func (r *serverReader) sentInitial(dcidLen int) {
	if r.v.RetryTokenLen == nil {
		r.dcidLen, r.sentSeen = dcidLen, true
	}
}

// receivedView is what the view reads of one received packet, from a stored qlog's JSON
// or from quic-go's event (LiveView).
type receivedView struct {
	ptype         string
	length        int
	scidLen       int // -1: not a long header, or not logged
	checksum      *uint32
	retryTokenLen *int
	frames        []frameView
}

type frameView struct {
	name        string
	newTokenLen *int
	close       *Close
}

func (r *serverReader) received(data json.RawMessage) {
	var p receivedPacket
	if json.Unmarshal(data, &p) != nil {
		return
	}
	rp := receivedView{ptype: p.Header.PacketType, length: p.Raw.Length, scidLen: -1, checksum: p.Checksum}
	switch rp.ptype {
	case "initial", "handshake", "0RTT", "retry":
		if isHex(p.Header.SCID) {
			rp.scidLen = len(p.Header.SCID) / 2
		}
	}
	if rp.ptype == "retry" && p.Header.Token != nil {
		n := tokenLen(p.Header.Token.Raw.Data, p.Header.Token.Raw.Length)
		rp.retryTokenLen = &n
	}
	for _, raw := range p.Frames {
		var f frameHead
		if json.Unmarshal(raw, &f) != nil {
			continue
		}
		fv := frameView{name: f.FrameType}
		switch f.FrameType {
		case "new_token":
			if f.Token != nil {
				n := tokenLen(f.Token.Raw.Data, f.Token.Raw.Length)
				fv.newTokenLen = &n
			}
		case "connection_close":
			fv.close = frameClose(f)
		}
		rp.frames = append(rp.frames, fv)
	}
	r.add(rp)
}

// add reads one received packet into the view, in the order they were received.
func (r *serverReader) add(p receivedView) {
	if r.packets >= maxServerPackets {
		return
	}
	r.packets++
	t := p.ptype
	if p.scidLen >= 0 && r.v.SCIDLen == nil {
		n := p.scidLen
		r.v.SCIDLen = &n
	}
	if t == "retry" {
		if r.v.RetryTokenLen == nil && p.retryTokenLen != nil {
			r.v.RetryTokenLen = p.retryTokenLen
			if r.sentSeen {
				n := r.dcidLen
				r.v.RetryODCIDLen = &n
			}
		}
		// The attempt after a Retry starts over: its first datagram is the one to read.
		r.v.FirstDatagram, r.firstSum, r.firstOpen, r.v.InitialFrames = nil, nil, false, nil
		return
	}
	frames := make([]string, 0, len(p.frames))
	pingOnly := len(p.frames) > 0
	for _, f := range p.frames {
		frames = append(frames, f.name)
		if f.name != "ping" && f.name != "padding" {
			pingOnly = false
		}
		if f.newTokenLen != nil && r.v.NewTokenLen == nil {
			r.v.NewTokenLen = f.newTokenLen
		}
		if f.close != nil && r.v.Close == nil {
			r.v.Close = f.close
			n := p.length
			r.v.ClosePacketLen = &n
		}
	}
	if t == "initial" && r.v.InitialFrames == nil {
		r.v.InitialFrames = frames
	}
	if t == "1RTT" {
		if r.v.OneRTTFrames == nil {
			r.v.OneRTTFrames = frames
		}
		if pingOnly {
			r.v.PingOnly++
		}
	}
	// The first datagram: quic-go logs each coalesced packet with the checksum of the
	// datagram that carried it, so packets in a row with one checksum are one datagram.
	switch {
	case (t == "initial" || t == "handshake") && r.v.FirstDatagram == nil && p.checksum != nil:
		r.v.FirstDatagram = &Datagram{Bytes: p.length, Packets: []string{t}}
		r.firstSum, r.firstOpen = p.checksum, true
	case r.firstOpen && p.checksum != nil && *p.checksum == *r.firstSum:
		r.v.FirstDatagram.Bytes += p.length
		r.v.FirstDatagram.Packets = append(r.v.FirstDatagram.Packets, t)
	default:
		r.firstOpen = false
	}
}

// frameClose reads a CONNECTION_CLOSE frame as a Close (initiator remote).
func frameClose(f frameHead) *Close {
	c := &Close{Initiator: "remote"}
	switch f.ErrorSpace {
	case "transport", "application":
		c.Space = f.ErrorSpace
	}
	if f.Reason != nil {
		c.Reason = *f.Reason
	}
	var trig string
	if json.Unmarshal(f.TriggerFrame, &trig) == nil {
		c.Trigger = trig
	} else if len(f.TriggerFrame) > 0 && string(f.TriggerFrame) != "null" {
		c.Trigger = strings.Trim(string(f.TriggerFrame), `"`)
	}
	var name string
	var n uint64
	switch {
	case json.Unmarshal(f.Error, &n) == nil:
		c.Code = &n
	case json.Unmarshal(f.Error, &name) == nil && name != "" && name != "unknown":
		name = strings.ToLower(name)
		c.Error = name
		if v, ok := transportErrors[name]; ok && c.Space == "transport" {
			c.Code = &v
		}
		if hex, ok := strings.CutPrefix(name, "crypto_error_0x"); ok {
			if v, ok := parseHex(hex); ok {
				c.Code = &v
			}
		}
	}
	if c.Code == nil && f.ErrorCode != nil {
		c.Code = f.ErrorCode
	}
	if c.Space == "transport" && c.Code != nil && *c.Code >= cryptoErrorBase && *c.Code < 2*cryptoErrorBase {
		alert := *c.Code - cryptoErrorBase
		c.TLSAlert = &alert
		if c.Error == "" {
			c.Error = "crypto_error_0x" + formatHex(*c.Code)
		}
	}
	return c
}

func parseHex(s string) (uint64, bool) {
	if s == "" || len(s) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		default:
			return 0, false
		}
		v = v<<4 | d
	}
	return v, true
}

func formatHex(v uint64) string {
	const digits = "0123456789abcdef"
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v >>= 4 {
		b = append([]byte{digits[v&0xf]}, b...)
	}
	return string(b)
}

// Server returns what the qlog shows of the server's stack (see ServerView).
func (tr *Trace) Server() ServerView { return tr.server }
