package delayline

import (
	"net/netip"

	"github.com/doqscan/doqscan/internal/ipv4hdr"
)

// Errors of ParseIPv4 (package ipv4hdr's). The delay line counts such packets as dropped.
var (
	ErrShort     = ipv4hdr.ErrShort
	ErrNotIPv4   = ipv4hdr.ErrNotIPv4
	ErrBadIHL    = ipv4hdr.ErrBadIHL
	ErrBadTotLen = ipv4hdr.ErrBadTotLen
)

// Header is what the delay line needs from an IPv4 header.
type Header struct {
	Src, Dst netip.Addr
	Proto    uint8
}

// ParseIPv4 reads the addresses and protocol of an IPv4 datagram as read from a TUN
// device (IFF_NO_PI: the packet starts with the IP header). It never panics.
func ParseIPv4(b []byte) (Header, error) {
	h, err := ipv4hdr.Whole(b)
	if err != nil {
		return Header{}, err
	}
	return Header{Src: h.Src, Dst: h.Dst, Proto: h.Proto}, nil
}
