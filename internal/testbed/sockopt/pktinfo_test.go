package sockopt

import (
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// received builds the packet-info control message the kernel attaches to a datagram sent
// to dst (IP_PKTINFO's ipi_addr, IPV6_PKTINFO's ipi6_addr).
func received(dst netip.Addr) []byte {
	level, typ, n, off := unix.IPPROTO_IP, unix.IP_PKTINFO, 12, 8
	if dst.Is6() {
		level, typ, n, off = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, 20, 0
	}
	b := make([]byte, unix.CmsgSpace(n))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(unix.CmsgLen(n))
	copy(b[unix.CmsgLen(0)+off:], dst.AsSlice())
	return b
}

func TestPktinfoDst(t *testing.T) {
	for _, s := range []string{"198.19.1.2", "2001:2:0:8001::1", "2001:2:0:8002::50"} {
		a := netip.MustParseAddr(s)
		if got, ok := PktinfoDst(received(a)); !ok || got != a {
			t.Errorf("PktinfoDst(received %s) = %s, %v", a, got, ok)
		}
	}
	// IPV6_PKTINFO's address field is also where a reply's source goes.
	a := netip.MustParseAddr("2001:2:0:8001::7")
	if got, ok := PktinfoDst(PktinfoSrc(a)); !ok || got != a {
		t.Errorf("PktinfoDst(PktinfoSrc(%s)) = %s, %v", a, got, ok)
	}
	if _, ok := PktinfoDst(nil); ok {
		t.Error("PktinfoDst(nil) found an address")
	}
	if _, ok := PktinfoDst(received(a)[:unix.CmsgLen(8)]); ok {
		t.Error("PktinfoDst accepted a truncated IPV6_PKTINFO")
	}
}

// FuzzPktinfoDst: arbitrary control-message bytes never panic the parser, and whatever it
// returns is a valid address.
func FuzzPktinfoDst(f *testing.F) {
	f.Add(received(netip.MustParseAddr("198.19.1.2")))
	f.Add(received(netip.MustParseAddr("2001:2:0:8001::1")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, ok := PktinfoDst(b); ok && !a.IsValid() {
			t.Fatalf("PktinfoDst returned ok with an invalid address for %x", b)
		}
	})
}
