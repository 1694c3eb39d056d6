// Package quicwire reads what a QUIC datagram shows without keys: the form and, for
// long-header packets, the version, the packet type and the length of each packet
// coalesced into the datagram (RFC 9000 §12.2, §17.2; QUIC v2's type codes, RFC 9369
// §3.2). Packet numbers and payloads are protected and stay unread. The testbed's packet
// captures use it to say which datagram carried a server's Handshake packets.
package quicwire

import (
	"encoding/binary"

	"github.com/doqscan/doqscan/internal/quicver"
)

// Type is a packet's type.
type Type uint8

// Packet types (RFC 9000 §17; Short is the 1-RTT short header, §17.3).
const (
	Unknown Type = iota
	Initial
	ZeroRTT
	Handshake
	Retry
	VersionNegotiation
	Short
)

var typeNames = [...]string{"unknown", "initial", "0rtt", "handshake", "retry", "version_negotiation", "1rtt"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "unknown"
}

const (
	formLong = 0x80 // RFC 9000 §17.2: header form bit
	// maxCIDLen is QUIC v1/v2's bound (RFC 9000 §17.2); other versions may differ, and
	// their packets are read as Unknown beyond the version.
	maxCIDLen = 20
)

// Packet is one packet of a datagram as far as it can be read: Len is its length in
// bytes within the datagram (0 when it could not be told, e.g. cut by a snap length).
type Packet struct {
	Type    Type
	Version uint32 // long header only
	Len     int
	// SCID is a long-header packet's Source Connection ID (RFC 8999 §5.1, any version), a
	// sub-slice of the datagram; nil for a short header and for a header cut before the
	// SCID's end. A client keeps one SCID for all the long-header packets of a
	// connection and picks a new one for the next, so it tells connections apart that
	// share an address and port.
	SCID []byte
}

// typeOf maps the long-header type bits (0x30 of the first byte) of version v to a Type.
func typeOf(v uint32, bits byte) Type {
	switch v {
	case quicver.V2: // RFC 9369 §3.2
		return [4]Type{Retry, Initial, ZeroRTT, Handshake}[bits]
	case quicver.Negotiation:
		return VersionNegotiation
	}
	if v == quicver.V1 {
		return [4]Type{Initial, ZeroRTT, Handshake, Retry}[bits]
	}
	if _, ok := quicver.IsDraft(v); ok { // drafts 29..34 share v1's codes
		return [4]Type{Initial, ZeroRTT, Handshake, Retry}[bits]
	}
	return Unknown
}

// varint reads a QUIC variable-length integer (RFC 9000 §16) at b[i:].
func varint(b []byte, i int) (uint64, int, bool) {
	if i >= len(b) {
		return 0, 0, false
	}
	n := 1 << (b[i] >> 6)
	if i+n > len(b) {
		return 0, 0, false
	}
	v := uint64(b[i] & 0x3f)
	for k := 1; k < n; k++ {
		v = v<<8 | uint64(b[i+k])
	}
	return v, n, true
}

// Packets lists the packets of datagram b, in order, as far as b lets them be read. size
// is the datagram's real length when b is only its start (a capture's snap length; 0:
// len(b)): a packet whose type lies beyond b ends the list. A short-header packet runs
// to the datagram's end (RFC 9000 §12.2); so do Retry and Version Negotiation packets,
// which carry no Length field.
func Packets(b []byte, size int) []Packet {
	if size < len(b) {
		size = len(b)
	}
	var out []Packet
	for off := 0; off < len(b); {
		p, ok := packetAt(b, off, size)
		if !ok {
			break
		}
		out = append(out, p)
		if p.Len == 0 {
			break
		}
		off += p.Len
	}
	return out
}

// packetAt reads the packet at b[off:] of a datagram of size bytes.
func packetAt(b []byte, off, size int) (Packet, bool) {
	first := b[off]
	if first&formLong == 0 {
		return Packet{Type: Short, Len: size - off}, true
	}
	if off+5 > len(b) {
		return Packet{}, false
	}
	v := binary.BigEndian.Uint32(b[off+1 : off+5])
	t := typeOf(v, first>>4&0x3)
	p := Packet{Type: t, Version: v}
	// Every long header, of any version, carries both connection IDs, each after a
	// one-byte length (RFC 8999 §5.1); QUIC v1 and v2 bound them to 20 bytes.
	limit := maxCIDLen
	if t == Unknown || t == VersionNegotiation {
		limit = 255
	}
	i := off + 5
	scid := false
	if i < len(b) && int(b[i]) <= limit {
		i += 1 + int(b[i])
		if i < len(b) && int(b[i]) <= limit && i+1+int(b[i]) <= len(b) {
			p.SCID = b[i+1 : i+1+int(b[i])]
			i += 1 + int(b[i])
			scid = true
		}
	}
	switch t {
	case VersionNegotiation, Retry:
		p.Len = size - off
		return p, true
	case Unknown:
		return p, true
	}
	if !scid {
		return p, true
	}
	if t == Initial {
		tl, n, ok := varint(b, i)
		if !ok || tl > uint64(size) {
			return p, true
		}
		i += n + int(tl)
	}
	l, n, ok := varint(b, i)
	if !ok {
		return p, true
	}
	end := uint64(i+n) + l
	if end > uint64(size) {
		return p, true
	}
	p.Len = int(end) - off
	return p, true
}

// Has reports whether one of pkts is of type t.
func Has(pkts []Packet, t Type) bool {
	for _, p := range pkts {
		if p.Type == t {
			return true
		}
	}
	return false
}
