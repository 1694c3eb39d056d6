// Package ipv4hdr reads the IPv4 header (RFC 791 §3.1). The delay line (packets read
// from its TUN device), the packet capture (wirecap: packets cut by a snaplen) and the
// raw-socket TCP RTT probe (packets a raw socket delivers, header included) all parse
// it through Parse, which never panics and allocates nothing.
package ipv4hdr

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Header layout (RFC 791 §3.1).
const (
	Version        = 4
	MinHeaderLen   = 20 // IHL = 5 32-bit words
	TotalLenOffset = 2
	FragOffset     = 6      // flags (3 bits) + fragment offset (13 bits)
	FragOffsetMask = 0x1fff // fragment offset, in 8-byte units
	TTLOffset      = 8
	ProtoOffset    = 9
	ChecksumOffset = 10
	SrcOffset      = 12
	DstOffset      = 16
)

// Errors of Parse.
var (
	ErrShort     = errors.New("packet shorter than an IPv4 header")
	ErrNotIPv4   = errors.New("not an IPv4 packet")
	ErrBadIHL    = errors.New("IPv4 header length field out of range")
	ErrBadTotLen = errors.New("IPv4 total length does not match the datagram")
)

// Header is what the project reads from an IPv4 header.
type Header struct {
	Src, Dst  netip.Addr
	Proto     uint8
	HeaderLen int // IHL in bytes: the transport header starts at b[HeaderLen:]
	TotalLen  int // the datagram's length as the header states it
	// Fragment is the fragment offset in 8-byte units: non-zero for a later fragment,
	// which carries no transport header.
	Fragment int
}

// Parse reads the IPv4 header at the start of b. b may end anywhere after the header
// (a capture cut by its snaplen): TotalLen is checked against HeaderLen only; callers
// holding whole datagrams check it against len(b) too (Whole).
func Parse(b []byte) (Header, error) {
	if len(b) < MinHeaderLen {
		return Header{}, ErrShort
	}
	if b[0]>>4 != Version {
		return Header{}, ErrNotIPv4
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < MinHeaderLen || ihl > len(b) {
		return Header{}, ErrBadIHL
	}
	tot := int(binary.BigEndian.Uint16(b[TotalLenOffset:]))
	if tot < ihl {
		return Header{}, ErrBadTotLen
	}
	return Header{
		Src:       netip.AddrFrom4([4]byte(b[SrcOffset : SrcOffset+4])),
		Dst:       netip.AddrFrom4([4]byte(b[DstOffset : DstOffset+4])),
		Proto:     b[ProtoOffset],
		HeaderLen: ihl,
		TotalLen:  tot,
		Fragment:  int(binary.BigEndian.Uint16(b[FragOffset:]) & FragOffsetMask),
	}, nil
}

// Whole is Parse for a whole datagram (read from a TUN device or a raw socket): the
// stated total length must fit in b.
func Whole(b []byte) (Header, error) {
	h, err := Parse(b)
	if err != nil {
		return Header{}, err
	}
	if h.TotalLen > len(b) {
		return Header{}, ErrBadTotLen
	}
	return h, nil
}

// Checksum is the header checksum of h (RFC 791 §3.1: the 16-bit one's complement of
// the one's complement sum of the header's 16-bit words). Computed over a header whose
// checksum field is zero it is the value to store; over a valid header it is 0.
func Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	if len(h)%2 == 1 {
		sum += uint32(h[len(h)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
