package qlogana

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Serialisations of a qlog that the reader understands. Every one is turned into the
// same event stream (trace headers and events with a relative time in ms), which one set
// of rules (Parse, Analyze) reads.
const (
	// FormatJSONSeq: RFC 7464 records (0x1e before each), qlog 0.3 and later; what
	// quic-go's qlogwriter writes today (.sqlog).
	FormatJSONSeq = "json-seq"
	// FormatNDJSON: one JSON object per line, qlog draft-02 streaming; what quic-go
	// v0.21 to v0.2x wrote (a header line with "qlog_format":"NDJSON", then events).
	FormatNDJSON = "ndjson"
	// FormatJSON: one JSON document {"traces":[{"common_fields":..., "events":[...]}]},
	// qlog draft-01/02 (.qlog); events are objects or arrays named by "event_fields".
	FormatJSON = "json"
	// FormatJSONArray: a JSON array of NDJSON records (objects, or strings holding one),
	// as the study's performance database stored qlogs (q_log_outputs.content).
	FormatJSONArray = "json-array"
)

// maxInflated bounds a gzip member's inflated size (a qlog of one handshake is tens of
// KB; a bomb must not take the machine's memory).
const maxInflated = 64 << 20

// gzipMagic starts every gzip member (RFC 1952 §2.3.1).
var gzipMagic = []byte{0x1f, 0x8b}

// ErrNotQlog is returned when the input is none of the serialisations above.
var ErrNotQlog = errors.New("not a qlog (neither JSON-SEQ, NDJSON nor JSON)")

// ErrTooLarge is returned when an input exceeds the reader's bounds.
var ErrTooLarge = errors.New("qlog too large")

// Source describes the input a Trace was read from.
type Source struct {
	Format    string // one of the Format constants
	Gzip      bool   // the input was gzip-compressed
	Traces    int    // trace headers seen (quic-go starts one per connection attempt)
	ODCID     string // hex, the first trace's original destination connection ID ("" if not logged)
	Truncated bool   // the input ended inside a record (cut at a size bound or by a crash)
	// BadRecords counts records that were not valid JSON and were skipped (the last one
	// of a truncated input included).
	BadRecords int
}

// event is one record of any serialisation, normalised: either a trace header or an
// event with its time in ms relative to its trace's reference time.
type event struct {
	header bool
	ref    time.Time // header: the trace's wall-clock reference (zero if not logged)
	odcid  string    // header: the trace's ODCID (hex)
	ms     float64   // event: time in ms, relative to the trace's reference
	name   string    // event: "category:event", normalised to today's quic-go names
	data   json.RawMessage
}

// readEvents detects the serialisation of b (gzip by magic bytes, then JSON-SEQ by its
// record separator, a JSON array, a JSON document with "traces", or NDJSON), and calls
// emit for every header and event in order. It never panics on any input.
func readEvents(b []byte, emit func(*event) error) (Source, error) {
	var src Source
	if bytes.HasPrefix(b, gzipMagic) {
		src.Gzip = true
		inflated, truncated, err := gunzip(b)
		if err != nil {
			return src, err
		}
		b, src.Truncated = inflated, truncated
	}
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	var err error
	switch {
	case len(trimmed) == 0:
		return src, ErrNotQlog
	case trimmed[0] == recordSeparator:
		src.Format = FormatJSONSeq
		err = readRecords(b, recordSeparator, &src, emit)
	case trimmed[0] == '[':
		src.Format = FormatJSONArray
		err = readJSONArray(trimmed, &src, emit)
	case trimmed[0] == '{' && isTracesDocument(trimmed):
		src.Format = FormatJSON
		err = readJSONDocument(trimmed, &src, emit)
	case trimmed[0] == '{':
		src.Format = FormatNDJSON
		err = readRecords(b, '\n', &src, emit)
	default:
		return src, ErrNotQlog
	}
	return src, err
}

// gunzip inflates b (one or more members) up to maxInflated. An input cut inside the
// stream yields what was inflated and truncated=true.
func gunzip(b []byte) (out []byte, truncated bool, err error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, true, fmt.Errorf("%w: gzip header cut short", ErrNotQlog)
		}
		return nil, false, fmt.Errorf("%w: %v", ErrNotQlog, err)
	}
	out, err = io.ReadAll(io.LimitReader(zr, maxInflated+1))
	if len(out) > maxInflated {
		return nil, false, fmt.Errorf("%w: more than %d bytes inflated", ErrTooLarge, maxInflated)
	}
	// A stream cut short (io.ErrUnexpectedEOF) or corrupt after some point: keep what
	// inflated cleanly, like a record cut short.
	return out, err != nil, nil
}

// readRecords reads records separated by sep (JSON-SEQ: 0x1e; NDJSON: newline). A record
// that is not valid JSON is skipped; if it is the last one, the input was truncated.
func readRecords(b []byte, sep byte, src *Source, emit func(*event) error) error {
	st := &normaliser{src: src, emit: emit}
	n, lastBad := 0, false
	for len(b) > 0 {
		var rec []byte
		if i := bytes.IndexByte(b, sep); i >= 0 {
			rec, b = b[:i], b[i+1:]
		} else {
			rec, b = b, nil
		}
		rec = bytes.TrimSpace(rec)
		if len(rec) == 0 {
			continue
		}
		if n++; n > maxRecords {
			return fmt.Errorf("%w: more than %d records", ErrTooLarge, maxRecords)
		}
		ok, err := st.record(rec)
		if err != nil {
			return err
		}
		lastBad = !ok
	}
	if lastBad {
		src.Truncated = true
	}
	return nil
}

// readJSONArray reads a JSON array whose elements are records (objects) or strings
// holding one record each. An array cut short yields the records before the cut.
func readJSONArray(b []byte, src *Source, emit func(*event) error) error {
	st := &normaliser{src: src, emit: emit}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return ErrNotQlog
	}
	n := 0
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			src.Truncated = true
			src.BadRecords++
			return nil
		}
		if n++; n > maxRecords {
			return fmt.Errorf("%w: more than %d records", ErrTooLarge, maxRecords)
		}
		rec := []byte(raw)
		if len(raw) > 0 && raw[0] == '"' {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				src.BadRecords++
				continue
			}
			rec = bytes.TrimSpace([]byte(s))
		}
		if _, err := st.record(rec); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		src.Truncated = true
	}
	return nil
}

// isTracesDocument reports whether the object starting b has a "traces" member before
// its first event: a qlog JSON document rather than the first line of an NDJSON file.
func isTracesDocument(b []byte) bool {
	line := b
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		line = b[:i]
	}
	var h struct {
		Format string          `json:"qlog_format"`
		Traces json.RawMessage `json:"traces"`
	}
	if json.Unmarshal(line, &h) == nil {
		// A complete first line: a header (NDJSON), unless it is the whole document.
		return h.Traces != nil && h.Format != "NDJSON"
	}
	// A document spread over lines (pretty-printed) or cut short: look for its key.
	return bytes.Contains(b[:min(len(b), 1<<16)], []byte(`"traces"`))
}

// readJSONDocument streams a qlog JSON document: {"traces":[trace...]} where a trace has
// "common_fields", optionally "event_fields", and "events". A document cut short yields
// the events before the cut.
func readJSONDocument(b []byte, src *Source, emit func(*event) error) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	cut := func() error { src.Truncated = true; return nil }
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ErrNotQlog
	}
	version := ""
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return cut()
		}
		if key == "qlog_version" {
			if dec.Decode(&version) != nil {
				return cut()
			}
			continue
		}
		if key != "traces" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return cut()
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return cut()
		}
		for dec.More() {
			if done, err := readJSONTrace(dec, version, src, emit); err != nil || done {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return cut()
		}
	}
	return nil
}

// readJSONTrace reads one trace object of a JSON document. done: the input was cut.
func readJSONTrace(dec *json.Decoder, version string, src *Source, emit func(*event) error) (done bool, err error) {
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		src.Truncated = true
		return true, nil
	}
	var (
		common   json.RawMessage
		fields   []string
		events   []json.RawMessage
		cut      bool
		nRecords int
	)
	for dec.More() && !cut {
		key, err := dec.Token()
		if err != nil {
			cut = true
			break
		}
		switch key {
		case "common_fields", "configuration":
			var raw json.RawMessage
			if dec.Decode(&raw) != nil {
				cut = true
			} else if key == "common_fields" {
				common = raw
			}
		case "event_fields":
			if dec.Decode(&fields) != nil {
				cut = true
			}
		case "events":
			if t, err := dec.Token(); err != nil || t != json.Delim('[') {
				cut = true
				break
			}
			for dec.More() {
				var raw json.RawMessage
				if dec.Decode(&raw) != nil {
					cut = true
					break
				}
				if nRecords++; nRecords > maxRecords {
					return true, fmt.Errorf("%w: more than %d events", ErrTooLarge, maxRecords)
				}
				events = append(events, raw)
			}
			if !cut {
				if _, err := dec.Token(); err != nil {
					cut = true
				}
			}
		default:
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				cut = true
			}
		}
	}
	if !cut {
		if _, err := dec.Token(); err != nil {
			cut = true
		}
	}
	st := &normaliser{src: src, emit: emit}
	// The trace's common fields make its header; a trace without them still starts one.
	v, _ := json.Marshal(version)
	hdr := append(append([]byte(`{"qlog_version":`), v...), `,"trace":{}}`...)
	if common != nil {
		hdr = append(append(append(append([]byte(`{"qlog_version":`), v...), `,"trace":{"common_fields":`...), common...), "}}"...)
	}
	if _, err := st.record(hdr); err != nil {
		return true, err
	}
	for _, raw := range events {
		rec := []byte(raw)
		if len(raw) > 0 && raw[0] == '[' {
			rec = eventFromArray(raw, fields)
		}
		if _, err := st.record(rec); err != nil {
			return true, err
		}
	}
	if cut {
		src.Truncated = true
		src.BadRecords++
	}
	return cut, nil
}

// eventFromArray turns a draft-01/02 array event ([time, category, event, data] in the
// order of event_fields) into an object record.
func eventFromArray(raw json.RawMessage, fields []string) []byte {
	var vals []json.RawMessage
	if json.Unmarshal(raw, &vals) != nil {
		return nil
	}
	if len(fields) == 0 {
		fields = []string{"relative_time", "category", "event", "data"}
	}
	obj := map[string]json.RawMessage{}
	var category, name string
	for i, f := range fields {
		if i >= len(vals) {
			break
		}
		switch f {
		case "relative_time", "time", "delta_time":
			obj["time"] = vals[i]
		case "category":
			_ = json.Unmarshal(vals[i], &category)
		case "event", "event_type":
			_ = json.Unmarshal(vals[i], &name)
		case "data":
			obj["data"] = vals[i]
		}
	}
	n, _ := json.Marshal(category + ":" + name)
	obj["name"] = n
	out, _ := json.Marshal(obj)
	return out
}

// normaliser turns records of any draft into events: it recognises headers, resolves
// the time format and renames events to the names today's quic-go writes.
type normaliser struct {
	src  *Source
	emit func(*event) error
	// timeFormat of the current trace: "relative" (default), "delta" or "absolute".
	timeFormat string
	refMS      float64 // the trace's reference time in ms since the epoch (draft-02)
	lastMS     float64 // delta format: the previous event's time
	// draft02 is set for traces of qlog draft-02 and older, which log no
	// connection_state_updated: their handshake completes with the client's 1-RTT key.
	draft02  bool
	complete bool // a handshake_complete was emitted in this trace
}

// record reads one JSON record. ok=false: not valid JSON (skipped and counted).
func (n *normaliser) record(rec []byte) (ok bool, err error) {
	var r struct {
		Time    *float64        `json:"time"`
		Name    string          `json:"name"`
		Data    json.RawMessage `json:"data"`
		Version string          `json:"qlog_version"`
		Trace   *struct {
			CommonFields json.RawMessage `json:"common_fields"`
		} `json:"trace"`
		CommonFields json.RawMessage `json:"common_fields"` // draft-02 NDJSON has it in "trace"; be lenient
	}
	if err := json.Unmarshal(rec, &r); err != nil {
		n.src.BadRecords++
		return false, nil
	}
	if r.Time == nil || r.Name == "" {
		if r.Trace == nil && r.CommonFields == nil && r.Version == "" {
			return true, nil // neither header nor event: ignore
		}
		common := r.CommonFields
		if r.Trace != nil && r.Trace.CommonFields != nil {
			common = r.Trace.CommonFields
		}
		return true, n.header(r.Version, common)
	}
	ms := *r.Time
	switch n.timeFormat {
	case "delta":
		ms += n.lastMS
		n.lastMS = ms
	case "absolute":
		ms -= n.refMS
	}
	if math.IsNaN(ms) || math.IsInf(ms, 0) || math.Abs(ms) > 1e12 {
		return true, nil
	}
	name := canonicalName(r.Name)
	if err := n.emit(&event{ms: ms, name: name, data: r.Data}); err != nil {
		return true, err
	}
	if name == "quic:connection_state_updated" {
		n.complete = n.complete || bytes.Contains(r.Data, []byte(`"handshake_complete"`))
	}
	if n.draft02 && !n.complete && name == "security:key_updated" && isClient1RTTKey(r.Data) {
		// quic-go < v0.3x logs no state change: its TLS stack hands the client the 1-RTT
		// key when the server's Finished verified, the moment today's quic-go logs as
		// handshake_complete.
		n.complete = true
		return true, n.emit(&event{ms: ms, name: "quic:connection_state_updated", data: json.RawMessage(`{"new":"handshake_complete"}`)})
	}
	return true, nil
}

func isClient1RTTKey(data json.RawMessage) bool {
	var d struct {
		KeyType string `json:"key_type"`
	}
	return json.Unmarshal(data, &d) == nil && d.KeyType == "client_1rtt_secret"
}

// header starts a new trace from its common fields.
func (n *normaliser) header(version string, common json.RawMessage) error {
	n.src.Traces++
	n.timeFormat, n.refMS, n.lastMS, n.complete = "relative", 0, 0, false
	n.draft02 = strings.HasPrefix(version, "draft-")
	ev := &event{header: true}
	var c struct {
		ODCID         string          `json:"ODCID"`
		ODCIDLower    string          `json:"odcid"`
		GroupID       string          `json:"group_id"`
		TimeFormat    string          `json:"time_format"`
		ReferenceTime json.RawMessage `json:"reference_time"`
	}
	if common != nil && json.Unmarshal(common, &c) == nil {
		ev.odcid = firstNonEmpty(c.ODCID, c.ODCIDLower, c.GroupID)
		if c.TimeFormat != "" {
			n.timeFormat = c.TimeFormat
		}
		ev.ref, n.refMS = referenceOf(c.ReferenceTime)
		if n.timeFormat == "absolute" && n.refMS == 0 {
			n.timeFormat = "relative" // absolute times without a reference: cannot place them
		}
	}
	if ev.odcid != "" && !isHex(ev.odcid) {
		ev.odcid = ""
	}
	if n.src.Traces == 1 {
		n.src.ODCID = strings.ToLower(ev.odcid)
	}
	return n.emit(ev)
}

// referenceOf reads a reference time: a number of ms since the epoch (draft-02) or an
// object with an RFC 3339 wall_clock_time (qlog 0.3+ as quic-go writes it).
func referenceOf(raw json.RawMessage) (time.Time, float64) {
	if len(raw) == 0 {
		return time.Time{}, 0
	}
	var ms float64
	if json.Unmarshal(raw, &ms) == nil || unmarshalQuoted(raw, &ms) {
		if ms > 0 && ms < 1e14 && !math.IsNaN(ms) {
			return time.UnixMilli(0).Add(time.Duration(ms * 1e6)), ms
		}
		return time.Time{}, 0
	}
	var o struct {
		WallClockTime string `json:"wall_clock_time"`
	}
	if json.Unmarshal(raw, &o) == nil && o.WallClockTime != "" {
		if t, err := time.Parse(time.RFC3339Nano, o.WallClockTime); err == nil {
			return t, 0
		}
	}
	return time.Time{}, 0
}

func unmarshalQuoted(raw json.RawMessage, f *float64) bool {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return false
	}
	*f = v
	return true
}

// Close is how a connection ended: its qlog's connection_closed event. quic-go today
// logs initiator, connection_error (a name, or "unknown" and error_code) or
// application_error ("unknown" and error_code), reason and trigger; qlog draft-02
// (quic-go v0.2x) owner, connection_code or application_code, reason and trigger.
type Close struct {
	Initiator string `json:"initiator,omitempty"` // "local" (we closed it) or "remote" (the peer did)
	// Space is "transport" (a transport error: CONNECTION_CLOSE 0x1c, or ours) or
	// "application" (0x1d); "" when neither is logged (a timeout: see Trigger).
	Space string `json:"space,omitempty"`
	// Error is the transport error's name as RFC 9000 §20.1 spells it in lower case
	// ("connection_refused"), "crypto_error_0x178" for a TLS alert (RFC 9001 §4.8), ""
	// when the qlog gives only a number.
	Error    string  `json:"error,omitempty"`
	Code     *uint64 `json:"code,omitempty"`      // the error code, when logged or named
	TLSAlert *uint64 `json:"tls_alert,omitempty"` // a crypto error's TLS alert (code - 0x100), e.g. 120 no_application_protocol
	Reason   string  `json:"reason,omitempty"`
	Trigger  string  `json:"trigger,omitempty"` // e.g. "idle_timeout", "handshake_timeout", "stateless_reset"
}

// transportErrors are the QUIC transport error codes by their qlog names (RFC 9000
// §20.1 in lower case, as quic-go's qlog writes them).
var transportErrors = map[string]uint64{
	"no_error": 0x0, "internal_error": 0x1, "connection_refused": 0x2, "flow_control_error": 0x3,
	"stream_limit_error": 0x4, "stream_state_error": 0x5, "final_size_error": 0x6, "frame_encoding_error": 0x7,
	"transport_parameter_error": 0x8, "connection_id_limit_error": 0x9, "protocol_violation": 0xa,
	"invalid_token": 0xb, "application_error": 0xc, "crypto_buffer_exceeded": 0xd, "key_update_error": 0xe,
	"aead_limit_reached": 0xf, "no_viable_path": 0x10,
}

// cryptoErrorBase: a TLS alert travels as the transport error 0x100 + alert (RFC 9001 §4.8).
const cryptoErrorBase = 0x100

// parseClose reads a connection_closed event's data of any vintage (see Close); nil if
// it is not an object.
func parseClose(data json.RawMessage) *Close {
	var d struct {
		Initiator        string          `json:"initiator"`
		Owner            string          `json:"owner"`
		ConnectionError  json.RawMessage `json:"connection_error"`
		ConnectionCode   json.RawMessage `json:"connection_code"`
		ApplicationError json.RawMessage `json:"application_error"`
		ApplicationCode  json.RawMessage `json:"application_code"`
		ErrorCode        *uint64         `json:"error_code"`
		Reason           string          `json:"reason"`
		Trigger          string          `json:"trigger"`
	}
	if json.Unmarshal(data, &d) != nil {
		return nil
	}
	c := &Close{Initiator: firstNonEmpty(d.Initiator, d.Owner), Reason: d.Reason, Trigger: d.Trigger}
	var code json.RawMessage
	switch {
	case d.ConnectionError != nil || d.ConnectionCode != nil:
		c.Space, code = "transport", d.ConnectionError
		if code == nil {
			code = d.ConnectionCode
		}
	case d.ApplicationError != nil || d.ApplicationCode != nil:
		c.Space, code = "application", d.ApplicationError
		if code == nil {
			code = d.ApplicationCode
		}
	}
	var name string
	var n uint64
	switch {
	case json.Unmarshal(code, &n) == nil:
		c.Code = &n
	case json.Unmarshal(code, &name) == nil && name != "unknown":
		name = strings.ToLower(name)
		c.Error = name
		if hex, ok := strings.CutPrefix(name, "crypto_error_0x"); ok {
			if v, err := strconv.ParseUint(hex, 16, 64); err == nil {
				c.Code = &v
			}
		} else if v, ok := transportErrors[name]; ok && c.Space == "transport" {
			c.Code = &v
		}
	}
	if c.Code == nil && d.ErrorCode != nil {
		c.Code = d.ErrorCode
	}
	if c.Space == "transport" && c.Code != nil && *c.Code >= cryptoErrorBase && *c.Code < 2*cryptoErrorBase {
		alert := *c.Code - cryptoErrorBase
		c.TLSAlert = &alert
		if c.Error == "" {
			c.Error = fmt.Sprintf("crypto_error_%#x", *c.Code)
		}
	}
	return c
}

// canonicalNames maps event names of other qlog drafts to the ones today's quic-go
// writes, which the rules read.
var canonicalNames = map[string]string{
	"quic:packet_sent":                      "transport:packet_sent",
	"quic:packet_received":                  "transport:packet_received",
	"quic:packet_lost":                      "recovery:packet_lost",
	"quic:recovery_metrics_updated":         "recovery:metrics_updated",
	"quic:version_information":              "transport:version_information",
	"transport:connection_state_updated":    "quic:connection_state_updated",
	"connectivity:connection_state_updated": "quic:connection_state_updated",
	"connectivity:connection_started":       "transport:connection_started",
	"quic:connection_started":               "transport:connection_started",
	"security:key_update":                   "security:key_updated",
	"quic:key_updated":                      "security:key_updated",
	"recovery:metric_update":                "recovery:metrics_updated",
	"connectivity:version_information":      "transport:version_information",
	"connectivity:connection_closed":        "transport:connection_closed",
	"quic:connection_closed":                "transport:connection_closed",
}

func canonicalName(name string) string {
	if c, ok := canonicalNames[name]; ok {
		return c
	}
	return name
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func isHex(s string) bool {
	if len(s) > 2*20 || len(s)%2 != 0 { // a connection ID is at most 20 bytes (RFC 9000 §17.2)
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
