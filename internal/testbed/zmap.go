package testbed

import (
	"net/netip"
	"strings"

	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// BlocklistOutsideTestbed returns a zmap blocklist (-b) holding every IPv4 prefix outside
// 198.18.0.0/15: with it, even a wrong allowlist cannot send a probe out of the testbed.
// (zmap's default blocklist excludes 198.18.0.0/15 itself, so testbed scans must pass -b.)
func BlocklistOutsideTestbed() string {
	var b strings.Builder
	b.WriteString("# everything outside the testbed (198.18.0.0/15)\n")
	for _, p := range complement(netns.TestbedPrefix) {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

// complement returns the prefixes covering 0.0.0.0/0 minus p (one per bit of p).
func complement(p netip.Prefix) []netip.Prefix {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	var out []netip.Prefix
	for bits := 1; bits <= p.Bits(); bits++ {
		flipped := v ^ (1 << (32 - bits))
		ip := netip.AddrFrom4([4]byte{byte(flipped >> 24), byte(flipped >> 16), byte(flipped >> 8), byte(flipped)})
		q, _ := ip.Prefix(bits)
		out = append(out, q)
	}
	return out
}
