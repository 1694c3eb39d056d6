// Package ipv6hdr reads the IPv6 header (RFC 8200 §3) and walks the extension headers
// that may follow it (§4) to the transport header. It is package ipv4hdr's IPv6
// counterpart: the delay line parses the packets it reads from its TUN device with it.
// Parse never panics and allocates nothing.
package ipv6hdr

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Header layout (RFC 8200 §3).
const (
	Version          = 6
	HeaderLen        = 40 // the fixed header; extension headers follow
	PayloadLenOffset = 4
	NextHeaderOffset = 6
	HopLimitOffset   = 7
	SrcOffset        = 8
	DstOffset        = 24
)

// Extension headers Parse walks (RFC 8200 §4.1 order; IANA "IPv6 Extension Header Types").
const (
	HopByHop    = 0
	Routing     = 43
	Fragment    = 44
	DestOptions = 60
	NoNext      = 59 // RFC 8200 §4.7: nothing follows
	// maxExtHeaders bounds the walk: RFC 8200 §4.1 recommends each header at most once
	// (destination options twice); more is a malformed or hostile packet.
	maxExtHeaders = 8
)

// Errors of Parse.
var (
	ErrShort      = errors.New("packet shorter than an IPv6 header")
	ErrNotIPv6    = errors.New("not an IPv6 packet")
	ErrBadPayload = errors.New("IPv6 payload length does not match the datagram")
	ErrBadExt     = errors.New("IPv6 extension header runs past the packet or repeats too often")
)

// Header is what the project reads from an IPv6 header chain.
type Header struct {
	Src, Dst netip.Addr
	// Proto is the upper-layer protocol: the Next Header value after the last extension
	// header walked (6 TCP, 17 UDP, 58 ICMPv6, 59 nothing).
	Proto uint8
	// HeaderLen is the length of the fixed header plus the extension headers walked: the
	// transport header starts at b[HeaderLen:] (unless Fragment is non-zero).
	HeaderLen int
	// TotalLen is the datagram's length as the header states it (40 + payload length).
	TotalLen int
	// Fragment is the fragment offset in 8-byte units from a Fragment header: non-zero
	// for a later fragment, which carries no transport header.
	Fragment int
}

// Parse reads the IPv6 header at the start of b and the extension headers after it. b
// may end anywhere after them (a capture cut by its snaplen): TotalLen is not checked
// against len(b) (Whole does that).
func Parse(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrShort
	}
	if b[0]>>4 != Version {
		return Header{}, ErrNotIPv6
	}
	h := Header{
		Src:      netip.AddrFrom16([16]byte(b[SrcOffset : SrcOffset+16])),
		Dst:      netip.AddrFrom16([16]byte(b[DstOffset : DstOffset+16])),
		TotalLen: HeaderLen + int(binary.BigEndian.Uint16(b[PayloadLenOffset:])),
	}
	next, off := b[NextHeaderOffset], HeaderLen
	for range maxExtHeaders {
		switch next {
		case HopByHop, Routing, DestOptions:
			// Next Header, Hdr Ext Len in 8-byte units not counting the first 8 (§4.3).
			if off+2 > len(b) {
				return Header{}, ErrBadExt
			}
			n := 8 + int(b[off+1])*8
			if off+n > len(b) {
				return Header{}, ErrBadExt
			}
			next, off = b[off], off+n
		case Fragment:
			// Next Header, reserved, offset (13 bits) + flags, identification (§4.5).
			if off+8 > len(b) {
				return Header{}, ErrBadExt
			}
			h.Fragment = int(binary.BigEndian.Uint16(b[off+2:]) >> 3)
			next, off = b[off], off+8
			if h.Fragment != 0 {
				// A later fragment: what follows is not a header.
				h.Proto, h.HeaderLen = next, off
				return h, nil
			}
		default:
			h.Proto, h.HeaderLen = next, off
			return h, nil
		}
	}
	return Header{}, ErrBadExt
}

// Whole is Parse for a whole datagram (read from a TUN device): the stated length must
// fit in b and cover the extension headers.
func Whole(b []byte) (Header, error) {
	h, err := Parse(b)
	if err != nil {
		return Header{}, err
	}
	if h.TotalLen > len(b) || h.HeaderLen > h.TotalLen {
		return Header{}, ErrBadPayload
	}
	return h, nil
}
