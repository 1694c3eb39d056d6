package ipv6hdr

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// build returns an IPv6 packet: the fixed header (payload length plen, next header nh),
// then ext (extension headers, already chained), then payload bytes.
func build(nh uint8, plen int, ext []byte, payload int) []byte {
	b := make([]byte, HeaderLen, HeaderLen+len(ext)+payload)
	b[0] = Version << 4
	binary.BigEndian.PutUint16(b[PayloadLenOffset:], uint16(plen))
	b[NextHeaderOffset] = nh
	b[HopLimitOffset] = 64
	s, d := netip.MustParseAddr("2001:2::2").As16(), netip.MustParseAddr("2001:2:0:8001::53").As16()
	copy(b[SrcOffset:], s[:])
	copy(b[DstOffset:], d[:])
	b = append(b, ext...)
	return append(b, make([]byte, payload)...)
}

func TestParse(t *testing.T) {
	hbh := []byte{DestOptions, 0, 1, 4, 0, 0, 0, 0}                 // hop-by-hop, 8 bytes, next: dest options
	dst := []byte{17, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} // dest options, 16 bytes, next: UDP
	firstFrag := []byte{17, 0, 0, 1, 0, 0, 0, 7}                    // offset 0, M flag
	laterFrag := []byte{17, 0, 0x05, 0xc8, 0, 0, 0, 7}              // offset 185
	for _, tc := range []struct {
		name       string
		b          []byte
		whole      bool
		err        error
		proto      uint8
		hlen, frag int
	}{
		{"udp", build(17, 8, nil, 8), true, nil, 17, 40, 0},
		{"tcp cut by a snaplen", build(6, 1400, nil, 20), false, nil, 6, 40, 0},
		{"icmpv6", build(58, 8, nil, 8), true, nil, 58, 40, 0},
		{"hop-by-hop and destination options", build(HopByHop, 32, append(append([]byte{}, hbh...), dst...), 8), true, nil, 17, 64, 0},
		{"first fragment", build(Fragment, 16, firstFrag, 8), true, nil, 17, 48, 0},
		{"later fragment", build(Fragment, 16, laterFrag, 8), true, nil, 17, 48, 185},
		{"no next header", build(NoNext, 0, nil, 0), true, nil, NoNext, 40, 0},
		{"short", make([]byte, 39), false, ErrShort, 0, 0, 0},
		{"IPv4", func() []byte { b := build(17, 8, nil, 8); b[0] = 0x45; return b }(), false, ErrNotIPv6, 0, 0, 0},
		{"extension past the end", build(HopByHop, 8, []byte{17, 3, 0, 0, 0, 0, 0, 0}, 0), false, ErrBadExt, 0, 0, 0},
		{"extension length byte missing", build(Routing, 0, nil, 0), false, ErrBadExt, 0, 0, 0},
		{"endless chain", build(DestOptions, 80, func() []byte {
			var e []byte
			for range 10 {
				e = append(e, DestOptions, 0, 1, 4, 0, 0, 0, 0)
			}
			return e
		}(), 0), false, ErrBadExt, 0, 0, 0},
		{"payload length past the datagram", build(17, 100, nil, 8), false, nil, 17, 40, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Parse(tc.b)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Parse: %v, want %v", err, tc.err)
			}
			if err == nil {
				if h.Proto != tc.proto || h.HeaderLen != tc.hlen || h.Fragment != tc.frag {
					t.Fatalf("header %+v, want proto %d header length %d fragment %d", h, tc.proto, tc.hlen, tc.frag)
				}
				if h.Src != netip.MustParseAddr("2001:2::2") || h.Dst != netip.MustParseAddr("2001:2:0:8001::53") {
					t.Fatalf("addresses %v -> %v", h.Src, h.Dst)
				}
			}
			_, werr := Whole(tc.b)
			if (werr == nil) != tc.whole {
				t.Fatalf("Whole: %v, want ok=%v", werr, tc.whole)
			}
		})
	}
}

// FuzzParse: any bytes give a header whose transport offset lies inside the bytes read,
// or an error, never a panic.
func FuzzParse(f *testing.F) {
	f.Add(build(17, 8, nil, 8))
	f.Add(build(HopByHop, 16, []byte{Fragment, 0, 1, 4, 0, 0, 0, 0, 6, 0, 0, 8, 0, 0, 0, 1}, 0))
	f.Add([]byte{0x60})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Parse(b)
		if err != nil {
			return
		}
		if h.HeaderLen < HeaderLen || h.HeaderLen > len(b) {
			t.Fatalf("transport offset %d in a %d-byte packet", h.HeaderLen, len(b))
		}
		if w, err := Whole(b); err == nil && (w.TotalLen > len(b) || w.HeaderLen > w.TotalLen) {
			t.Fatalf("Whole accepted %+v for %d bytes", w, len(b))
		}
	})
}
