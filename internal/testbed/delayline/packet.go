package delayline

import (
	"errors"
	"net/netip"
)

// IPv4 header layout (RFC 791 §3.1).
const (
	ipv4Version      = 4
	ipv4MinHeaderLen = 20 // IHL = 5 words
	ipv4ProtoOffset  = 9
	ipv4SrcOffset    = 12
	ipv4DstOffset    = 16
)

// Errors of ParseIPv4. The delay line counts such packets as dropped.
var (
	ErrShort     = errors.New("packet shorter than an IPv4 header")
	ErrNotIPv4   = errors.New("not an IPv4 packet")
	ErrBadIHL    = errors.New("IPv4 header length field out of range")
	ErrBadTotLen = errors.New("IPv4 total length does not match the datagram")
)

// Header is what the delay line needs from an IPv4 header.
type Header struct {
	Src, Dst netip.Addr
	Proto    uint8
}

// ParseIPv4 reads the addresses and protocol of an IPv4 datagram as read from a TUN
// device (IFF_NO_PI: the packet starts with the IP header). It never panics.
func ParseIPv4(b []byte) (Header, error) {
	if len(b) < ipv4MinHeaderLen {
		return Header{}, ErrShort
	}
	if b[0]>>4 != ipv4Version {
		return Header{}, ErrNotIPv4
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < ipv4MinHeaderLen || ihl > len(b) {
		return Header{}, ErrBadIHL
	}
	tot := int(b[2])<<8 | int(b[3])
	if tot < ihl || tot > len(b) {
		return Header{}, ErrBadTotLen
	}
	return Header{
		Src:   netip.AddrFrom4([4]byte(b[ipv4SrcOffset : ipv4SrcOffset+4])),
		Dst:   netip.AddrFrom4([4]byte(b[ipv4DstOffset : ipv4DstOffset+4])),
		Proto: b[ipv4ProtoOffset],
	}, nil
}
