package probe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/doqscan/doqscan/internal/quicver"
)

// QUIC wire constants of the probe and of Version Negotiation.
const (
	// MinInitialDatagram is the smallest datagram a client Initial may travel in
	// (RFC 9000 §14.1); quic-go and quinn silently drop smaller ones (FIELD-NOTES).
	MinInitialDatagram = 1200
	// MaxProbeDatagram keeps the probe inside one Ethernet frame: 1500 - 20 (IPv4) - 8 (UDP),
	// also zmap 2.1.1's udp module limit.
	MaxProbeDatagram = 1472
	// MinCIDLen, MaxCIDLen bound the probe's DCID: servers answer VN only for an Initial
	// whose DCID is at least 8 bytes (RFC 9000 §7.2) and at most 20 (RFC 9000 §17.2).
	MinCIDLen = 8
	MaxCIDLen = 20
	// headerFormLong is the Header Form bit (RFC 9000 §17.2, RFC 8999 §5.1).
	headerFormLong = 0x80
	// fixedBit must be 1 in v1 packets (RFC 9000 §17.2); VN leaves it arbitrary (§17.2.1).
	fixedBit = 0x40
	// initialFirstByte is long header, fixed bit, type Initial (0b00), 4-byte packet
	// number (RFC 9000 §17.2.2).
	initialFirstByte = headerFormLong | fixedBit | 0x03
	// minStatelessReset is the smallest possible stateless reset: 5 unpredictable bytes
	// and a 16-byte token (RFC 9000 §10.3).
	minStatelessReset = 21
)

// Default connection IDs of the probe: recognisable ASCII, so a VN reply (which echoes
// them, RFC 9000 §17.2.1) is validated and a packet capture is self-explaining.
var (
	DefaultDCID = []byte("doqscan-vn-dcid!") // 16 bytes
	DefaultSCID = []byte("doqscan-scid")     // 12 bytes
)

// QUICProbe describes the VN-forcing Initial.
type QUICProbe struct {
	Version uint32 // default quicver.ProbeGrease
	DCID    []byte // 8..20 bytes
	SCID    []byte // 0..20 bytes
	Size    int    // datagram size, MinInitialDatagram..MaxProbeDatagram
}

// DefaultQUICProbe is the probe zprobe sends unless told otherwise.
func DefaultQUICProbe() QUICProbe {
	return QUICProbe{Version: quicver.ProbeGrease, DCID: DefaultDCID, SCID: DefaultSCID, Size: MinInitialDatagram}
}

// Validate checks the probe's parameters.
func (p QUICProbe) Validate() error {
	if len(p.DCID) < MinCIDLen || len(p.DCID) > MaxCIDLen {
		return fmt.Errorf("quic probe: DCID of %d bytes, want %d..%d (RFC 9000 §7.2, §17.2)", len(p.DCID), MinCIDLen, MaxCIDLen)
	}
	if len(p.SCID) > MaxCIDLen {
		return fmt.Errorf("quic probe: SCID of %d bytes, want at most %d (RFC 9000 §17.2)", len(p.SCID), MaxCIDLen)
	}
	if p.Size < MinInitialDatagram || p.Size > MaxProbeDatagram {
		return fmt.Errorf("quic probe: datagram of %d bytes, want %d..%d (RFC 9000 §14.1)", p.Size, MinInitialDatagram, MaxProbeDatagram)
	}
	if p.Version == quicver.V1 || p.Version == quicver.V2 {
		return fmt.Errorf("quic probe: version %s is supported by servers and would start a handshake; want one that forces VN", quicver.Name(p.Version))
	}
	return nil
}

// Build returns the probe datagram: a long-header Initial (RFC 9000 §17.2.2) with an
// empty token, a 4-byte packet number and zero padding up to Size. Its payload is not
// encrypted: a server that does not know the version only reads the version-independent
// fields (RFC 8999 §5.1) and answers with Version Negotiation (RFC 9000 §6.1).
func (p QUICProbe) Build() ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, p.Size)
	b = append(b, initialFirstByte)
	b = binary.BigEndian.AppendUint32(b, p.Version)
	b = append(b, byte(len(p.DCID)))
	b = append(b, p.DCID...)
	b = append(b, byte(len(p.SCID)))
	b = append(b, p.SCID...)
	b = append(b, 0x00)                           // Token Length (varint 0)
	rest := p.Size - len(b) - 2                   // 2-byte Length varint
	b = append(b, 0x40|byte(rest>>8), byte(rest)) // RFC 9000 §16: 2-byte varint
	b = append(b, 0, 0, 0, 0)                     // Packet Number
	b = append(b, make([]byte, p.Size-len(b))...) // PADDING frames (0x00)
	return b, nil
}

// VN is a parsed Version Negotiation packet (RFC 9000 §17.2.1, RFC 8999 §6).
type VN struct {
	DCID, SCID []byte
	Versions   []uint32
}

// Errors of ParseVN.
var (
	ErrNotLongHeader = errors.New("not a long-header packet")
	ErrNotVN         = errors.New("long header with a non-zero version: not Version Negotiation")
	ErrTruncated     = errors.New("truncated")
	ErrNoVersions    = errors.New("no supported versions listed")
	ErrVersionsAlign = errors.New("supported versions not a multiple of 4 bytes")
)

// ParseVN parses a Version Negotiation packet. The connection ID lengths follow the
// version-independent invariants (RFC 8999 §5.1: up to 255 bytes); callers compare the
// CIDs against the probe's. The returned slices alias b.
func ParseVN(b []byte) (VN, error) {
	var vn VN
	if len(b) < 1 || b[0]&headerFormLong == 0 {
		return vn, ErrNotLongHeader
	}
	if len(b) < 7 {
		return vn, fmt.Errorf("version negotiation: %w", ErrTruncated)
	}
	if binary.BigEndian.Uint32(b[1:5]) != quicver.Negotiation {
		return vn, ErrNotVN
	}
	i := 5
	dl := int(b[i])
	i++
	if len(b) < i+dl+1 {
		return vn, fmt.Errorf("version negotiation DCID: %w", ErrTruncated)
	}
	vn.DCID = b[i : i+dl]
	i += dl
	sl := int(b[i])
	i++
	if len(b) < i+sl {
		return vn, fmt.Errorf("version negotiation SCID: %w", ErrTruncated)
	}
	vn.SCID = b[i : i+sl]
	i += sl
	rest := b[i:]
	if len(rest) == 0 {
		return vn, ErrNoVersions
	}
	if len(rest)%4 != 0 {
		return vn, ErrVersionsAlign
	}
	vn.Versions = make([]uint32, len(rest)/4)
	for j := range vn.Versions {
		vn.Versions[j] = binary.BigEndian.Uint32(rest[4*j:])
	}
	return vn, nil
}

// EchoesProbe says whether the VN answers p: its DCID is the probe's SCID and its SCID
// the probe's DCID (RFC 9000 §17.2.1).
func (vn VN) EchoesProbe(p QUICProbe) bool {
	return bytes.Equal(vn.DCID, p.SCID) && bytes.Equal(vn.SCID, p.DCID)
}

// Lists says whether the VN lists version v (a VN that lists the probe's own version
// must be discarded by a client, RFC 9000 §6.2).
func (vn VN) Lists(v uint32) bool {
	for _, x := range vn.Versions {
		if x == v {
			return true
		}
	}
	return false
}

// looksQUIC says whether a non-VN datagram has the shape of another QUIC packet: a long
// header whose invariant fields parse (RFC 8999 §5.1) or a short header with the fixed
// bit set long enough to be a stateless reset (RFC 9000 §10.3).
func looksQUIC(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	if b[0]&headerFormLong != 0 {
		if len(b) < 7 {
			return false
		}
		i := 5
		dl := int(b[i])
		if dl > MaxCIDLen || len(b) < i+1+dl+1 {
			return false
		}
		i += 1 + dl
		sl := int(b[i])
		return sl <= MaxCIDLen && len(b) >= i+1+sl
	}
	return b[0]&fixedBit != 0 && len(b) >= minStatelessReset
}
