// Package doq holds what DNS over QUIC (RFC 9250) and its drafts define, in one visible
// table shared by the verifier, the measurement client and the testbed's servers:
// ALPN identifiers, how each frames a DNS message, ports and error codes.
package doq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Ports the DoQ documents proposed (RFC 9250 §8.2; the study's §3 for the drafts).
const (
	PortRFC9250      = 853  // RFC 9250 §8.2: the IANA-assigned DoQ port
	PortExperimental = 784  // drafts -00/-01 and -03..: "MAY be used for experimentation"
	PortDraft02      = 8853 // draft -02: proposed for reservation, later dropped
)

// Application error codes (RFC 9250 §4.3).
const (
	CodeNoError          = 0x0 // RFC 9250 §4.3: no error
	CodeInternalError    = 0x1 // RFC 9250 §4.3: internal error
	CodeProtocolError    = 0x2 // RFC 9250 §4.3: protocol error
	CodeRequestCancelled = 0x3 // RFC 9250 §4.3: request cancelled
	CodeExcessiveLoad    = 0x4 // RFC 9250 §4.3: excessive load
	CodeUnspecifiedError = 0x5 // RFC 9250 §4.3: unspecified error
)

// MaxMessageSize is the largest DNS message a 2-byte length prefix can carry (RFC 9250 §4.2).
const MaxMessageSize = 65535

// Framing says how a DNS message is carried on a DoQ stream.
type Framing int

const (
	// LengthPrefixed: a 2-octet length field precedes the message (RFC 9250 §4.2; added
	// in draft-ietf-dprive-dnsoquic-03 §5.2, July 2021: -02 §5.2 sends the bare
	// message, -03 says "All DNS messages ... MUST be encoded as a 2-octet length field
	// followed by the message content").
	LengthPrefixed Framing = iota
	// Raw: the stream carries the bare message, its end marked by the stream FIN (drafts
	// -00 to -02, and AdGuard's "dq").
	Raw
)

// NoALPNFraming frames a DNS exchange on a QUIC connection that negotiated no ALPN at
// all: RFC 9250's, the current standard, since no ALPN names another. Such a server is
// not RFC 9250 compliant (§4.1.1: the ALPN "doq" is how DoQ is agreed), but some accept
// only connections offering no ALPN (rustls/quinn with no ALPN configured refuse any
// offered protocol with no_application_protocol); the verifier records them apart
// (outcome doq-no-alpn) and the testbed's no-ALPN servers answer this way.
const NoALPNFraming = LengthPrefixed

func (f Framing) String() string {
	if f == Raw {
		return "raw"
	}
	return "length-prefixed"
}

// Version is one DoQ ALPN identifier and what it means.
type Version struct {
	ALPN    string
	Name    string // for figures: "RFC 9250", "draft-02", ...
	Draft   int    // draft number; -1 for the RFC, -2 for non-standard identifiers
	Framing Framing
}

// Versions lists every DoQ ALPN doqscan knows, highest first: the order a verifier offers
// them in, so the highest common version is negotiated (as the study did).
var Versions = []Version{
	{"doq", "RFC 9250", -1, LengthPrefixed},
	{"doq-i12", "draft-12", 12, LengthPrefixed},
	{"doq-i11", "draft-11", 11, LengthPrefixed},
	{"doq-i10", "draft-10", 10, LengthPrefixed},
	{"doq-i09", "draft-09", 9, LengthPrefixed},
	{"doq-i08", "draft-08", 8, LengthPrefixed},
	{"doq-i07", "draft-07", 7, LengthPrefixed},
	{"doq-i06", "draft-06", 6, LengthPrefixed},
	{"doq-i05", "draft-05", 5, LengthPrefixed},
	{"doq-i04", "draft-04", 4, LengthPrefixed},
	{"doq-i03", "draft-03", 3, LengthPrefixed},
	{"doq-i02", "draft-02", 2, Raw},
	{"doq-i01", "draft-01", 1, Raw},
	{"doq-i00", "draft-00", 0, Raw},
	{"dq", "dq (AdGuard, pre-draft)", -2, Raw},
}

// ALPNs returns the ALPN identifiers of Versions, in order.
func ALPNs() []string {
	out := make([]string, len(Versions))
	for i, v := range Versions {
		out[i] = v.ALPN
	}
	return out
}

// Lookup returns the version with the given ALPN.
func Lookup(alpn string) (Version, bool) {
	for _, v := range Versions {
		if v.ALPN == alpn {
			return v, true
		}
	}
	return Version{}, false
}

// FramingFor returns how messages are framed under the negotiated ALPN. The ALPN decides,
// never the bytes (STYLE.md).
func FramingFor(alpn string) (Framing, error) {
	v, ok := Lookup(alpn)
	if !ok {
		return 0, fmt.Errorf("not a DoQ ALPN: %q", alpn)
	}
	return v.Framing, nil
}

// ErrMessageTooLarge is returned for messages that do not fit the framing.
var ErrMessageTooLarge = errors.New("DNS message larger than 65535 bytes")

// ErrStreamTooLong is returned when a stream carries more than the reader's limit.
var ErrStreamTooLong = errors.New("DoQ stream longer than the limit")

// ErrBadLength is returned when a length-prefixed stream's length disagrees with its data.
var ErrBadLength = errors.New("DoQ length prefix does not match the stream")

// Frame returns msg as it goes on a stream under framing f.
func Frame(f Framing, msg []byte) ([]byte, error) {
	if len(msg) > MaxMessageSize {
		return nil, ErrMessageTooLarge
	}
	if f == Raw {
		return msg, nil
	}
	out := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(out, uint16(len(msg)))
	copy(out[2:], msg)
	return out, nil
}

// ReadMessage reads one DNS message from a stream under framing f, reading at most
// limit bytes (a hostile server's endless stream costs no more). Length-prefixed: the
// prefix must match the bytes that follow up to the stream's end (RFC 9250 §4.2: one
// message per stream); raw: everything up to the FIN is the message.
func ReadMessage(r io.Reader, f Framing, limit int) ([]byte, error) {
	if limit <= 0 || limit > MaxMessageSize+2 {
		limit = MaxMessageSize + 2
	}
	data, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrStreamTooLong, limit)
	}
	if f == Raw {
		return data, nil
	}
	if len(data) < 2 {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadLength, len(data))
	}
	n := int(binary.BigEndian.Uint16(data))
	if n != len(data)-2 {
		return nil, fmt.Errorf("%w: prefix says %d, stream has %d", ErrBadLength, n, len(data)-2)
	}
	return data[2:], nil
}
