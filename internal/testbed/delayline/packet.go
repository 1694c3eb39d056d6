package delayline

import (
	"errors"
	"net/netip"

	"github.com/doqscan/doqscan/internal/ipv4hdr"
	"github.com/doqscan/doqscan/internal/ipv6hdr"
)

// Errors of ParsePacket (packages ipv4hdr's and ipv6hdr's). The delay line counts such
// packets as dropped.
var (
	ErrShort      = ipv4hdr.ErrShort
	ErrNotIPv4    = ipv4hdr.ErrNotIPv4
	ErrBadIHL     = ipv4hdr.ErrBadIHL
	ErrBadTotLen  = ipv4hdr.ErrBadTotLen
	ErrBadPayload = ipv6hdr.ErrBadPayload
	ErrBadExt     = ipv6hdr.ErrBadExt
	// ErrVersion: the first nibble is neither 4 nor 6.
	ErrVersion = errors.New("neither an IPv4 nor an IPv6 packet")
)

// Header is what the delay line needs from an IP header.
type Header struct {
	Src, Dst netip.Addr
	Proto    uint8 // IPv4 protocol, or the IPv6 upper-layer protocol after extension headers
}

// ParsePacket reads the addresses and protocol of an IPv4 or IPv6 datagram as read from
// a TUN device (IFF_NO_PI: the packet starts with the IP header; its first nibble is
// the version). It never panics.
func ParsePacket(b []byte) (Header, error) {
	if len(b) == 0 {
		return Header{}, ErrShort
	}
	switch b[0] >> 4 {
	case ipv4hdr.Version:
		return ParseIPv4(b)
	case ipv6hdr.Version:
		h, err := ipv6hdr.Whole(b)
		if err != nil {
			return Header{}, err
		}
		return Header{Src: h.Src, Dst: h.Dst, Proto: h.Proto}, nil
	}
	return Header{}, ErrVersion
}

// ParseIPv4 reads the addresses and protocol of an IPv4 datagram as read from a TUN
// device. It never panics.
func ParseIPv4(b []byte) (Header, error) {
	h, err := ipv4hdr.Whole(b)
	if err != nil {
		return Header{}, err
	}
	return Header{Src: h.Src, Dst: h.Dst, Proto: h.Proto}, nil
}
