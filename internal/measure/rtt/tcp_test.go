package rtt

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// TestSYNChecksum checks the SYN's checksum against each family's pseudo-header written
// out byte by byte (RFC 9293 §3.1: 12 bytes for IPv4; RFC 8200 §8.1: 40 bytes for IPv6):
// the one's complement sum over pseudo-header and segment must be 0xffff.
func TestSYNChecksum(t *testing.T) {
	for _, c := range []struct{ src, dst string }{
		{"198.18.0.2", "198.19.1.2"},
		{"2001:2::2", "2001:2:0:1::53"},
		{"::1", "::1"},
	} {
		src, dst := netip.MustParseAddr(c.src), netip.MustParseAddr(c.dst)
		seg := synSegment(src, netip.AddrPortFrom(dst, 853), 40000, 0x01020304)
		var pseudo []byte
		pseudo = append(pseudo, src.AsSlice()...)
		pseudo = append(pseudo, dst.AsSlice()...)
		if src.Is4() {
			pseudo = append(pseudo, 0, 6)
			pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(seg)))
		} else {
			pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(len(seg)))
			pseudo = append(pseudo, 0, 0, 0, 6)
		}
		var sum uint32
		b := append(pseudo, seg...)
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		if sum != 0xffff {
			t.Errorf("%s -> %s: one's complement sum %#04x, want 0xffff", src, dst, sum)
		}
	}
}
