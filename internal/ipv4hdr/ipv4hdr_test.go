package ipv4hdr

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// build returns an IPv4 header of ihl bytes (options zero) with the given total length,
// protocol, addresses and fragment offset, followed by payload bytes, checksummed.
func build(ihl, total int, proto uint8, src, dst string, frag uint16, payload int) []byte {
	b := make([]byte, ihl+payload)
	b[0] = Version<<4 | byte(ihl/4)
	binary.BigEndian.PutUint16(b[TotalLenOffset:], uint16(total))
	binary.BigEndian.PutUint16(b[FragOffset:], frag)
	b[TTLOffset] = 64
	b[ProtoOffset] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[SrcOffset:], s[:])
	copy(b[DstOffset:], d[:])
	binary.BigEndian.PutUint16(b[ChecksumOffset:], Checksum(b[:ihl]))
	return b
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		b         []byte
		whole     bool // also valid for Whole
		err       error
		ihl, frag int
	}{
		{"udp", build(20, 28, 17, "198.18.0.2", "198.19.1.1", 0, 8), true, nil, 20, 0},
		{"options", build(24, 44, 6, "198.18.0.2", "198.19.1.1", 0, 20), true, nil, 24, 0},
		{"cut by a snaplen", build(20, 1500, 6, "198.18.0.2", "198.19.1.1", 0, 20), false, nil, 20, 0},
		{"later fragment", build(20, 100, 17, "198.18.0.2", "198.19.1.1", 185, 80), true, nil, 20, 185},
		{"more-fragments flag only", build(20, 100, 17, "198.18.0.2", "198.19.1.1", 0x2000, 80), true, nil, 20, 0},
		{"short", make([]byte, 19), false, ErrShort, 0, 0},
		{"IPv6", func() []byte { b := build(20, 20, 17, "1.1.1.1", "2.2.2.2", 0, 0); b[0] = 0x60; return b }(), false, ErrNotIPv4, 0, 0},
		{"IHL 4 words", func() []byte { b := build(20, 20, 17, "1.1.1.1", "2.2.2.2", 0, 0); b[0] = 0x44; return b }(), false, ErrBadIHL, 0, 0},
		{"IHL past the end", func() []byte { b := build(20, 20, 17, "1.1.1.1", "2.2.2.2", 0, 0); b[0] = 0x46; return b }(), false, ErrBadIHL, 0, 0},
		{"total shorter than the header", build(20, 19, 17, "1.1.1.1", "2.2.2.2", 0, 0), false, ErrBadTotLen, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Parse(tc.b)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Parse: %v, want %v", err, tc.err)
			}
			if err == nil {
				if h.HeaderLen != tc.ihl || h.Fragment != tc.frag || h.TotalLen != int(binary.BigEndian.Uint16(tc.b[2:])) {
					t.Fatalf("header %+v, want IHL %d fragment %d", h, tc.ihl, tc.frag)
				}
				if h.Src != netip.AddrFrom4([4]byte(tc.b[12:16])) || h.Dst != netip.AddrFrom4([4]byte(tc.b[16:20])) || h.Proto != tc.b[9] {
					t.Fatalf("addresses/protocol %+v", h)
				}
				if Checksum(tc.b[:h.HeaderLen]) != 0 {
					t.Fatal("built header does not check")
				}
			}
			_, werr := Whole(tc.b)
			if (werr == nil) != tc.whole {
				t.Fatalf("Whole: %v, want ok=%v", werr, tc.whole)
			}
			if tc.err == nil && !tc.whole && !errors.Is(werr, ErrBadTotLen) {
				t.Fatalf("Whole of a cut datagram: %v, want ErrBadTotLen", werr)
			}
		})
	}
}

// TestChecksum: RFC 1071's example words, and an odd-length tail.
func TestChecksum(t *testing.T) {
	// RFC 1071 §3: 0001 f203 f4f5 f6f7 sums to ddf2 (one's complement), checksum 220d.
	if got := Checksum([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}); got != 0x220d {
		t.Fatalf("checksum %#04x, want 0x220d", got)
	}
	if got := Checksum([]byte{0x12}); got != ^uint16(0x1200) {
		t.Fatalf("odd tail: %#04x", got)
	}
}

// FuzzParse: never panics; an accepted header lies within b and is consistent.
func FuzzParse(f *testing.F) {
	f.Add(build(20, 28, 17, "198.18.0.2", "198.19.1.1", 0, 8))
	f.Add(build(60, 60, 6, "198.18.0.2", "198.19.1.1", 0, 0))
	f.Add([]byte{0x45})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Parse(b)
		if err != nil {
			return
		}
		if h.HeaderLen < MinHeaderLen || h.HeaderLen > len(b) || h.TotalLen < h.HeaderLen {
			t.Fatalf("accepted %+v for %d bytes", h, len(b))
		}
		if _, err := Whole(b); err == nil && h.TotalLen > len(b) {
			t.Fatalf("Whole accepted total %d of %d bytes", h.TotalLen, len(b))
		}
	})
}
