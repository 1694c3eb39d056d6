package pace

import (
	"errors"
	"math"
	"net/netip"
	"testing"

	"github.com/doqscan/doqscan/blocklist"
)

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func reserved() []netip.Prefix {
	var out []netip.Prefix
	for _, e := range blocklist.Reserved() {
		out = append(out, e.Prefix)
	}
	return out
}

func TestPerSlash16(t *testing.T) {
	cases := []struct {
		name              string
		rate              float64
		targets, excluded []netip.Prefix
		want              float64
		busiest           string
		scanned           uint64
	}{
		{"one /16", 10000, pfx("203.0.0.0/16"), nil, 10000, "203.0.0.0/16", 65536},
		{"two /16s", 400, pfx("203.0.0.0/16", "203.1.0.0/16"), nil, 200, "203.0.0.0/16", 131072},
		{"a /16 and a /24", 1000, pfx("203.0.0.0/16", "198.51.100.0/24"), nil, 1000 * 65536.0 / 65792, "203.0.0.0/16", 65792},
		{"overlaps count once", 1000, pfx("203.0.0.0/16", "203.0.7.0/24", "203.0.0.0/17"), nil, 1000, "203.0.0.0/16", 65536},
		{"an excluded half", 1000, pfx("203.0.0.0/15"), pfx("203.1.0.0/17"), 1000 * 65536.0 / 98304, "203.0.0.0/16", 98304},
		{"every /16 excluded but one", 1000, pfx("203.0.0.0/15"), pfx("203.1.0.0/16"), 1000, "203.0.0.0/16", 65536},
		{"a /8", 10000, pfx("12.0.0.0/8"), nil, 10000.0 / 256, "12.0.0.0/16", 1 << 24},
		{"nothing left", 1000, pfx("203.0.0.0/24"), pfx("203.0.0.0/16"), 0, "invalid Prefix", 0},
		{"IPv6 ignored", 1000, pfx("2001:db8::/32", "203.0.0.0/16"), nil, 1000, "203.0.0.0/16", 65536},
	}
	for _, c := range cases {
		got, busiest, n := PerSlash16(c.rate, c.targets, c.excluded)
		if math.Abs(got-c.want) > 1e-9 || busiest.String() != c.busiest || n != c.scanned {
			t.Errorf("%s: %v, %s, %d; want %v, %s, %d", c.name, got, busiest, n, c.want, c.busiest, c.scanned)
		}
	}
	// Internet-wide (no targets) minus the reserved ranges: the figures the page's limit
	// was chosen against.
	for _, rate := range []float64{10000, 100000, 1000000, 14880000} {
		per, busiest, n := PerSlash16(rate, nil, reserved())
		t.Logf("internet-wide at %.0f probes/s: %d addresses, %.2f/s towards the busiest /16 (%s)", rate, n, per, busiest)
		if want := rate * 65536 / float64(n); per != want {
			t.Errorf("internet-wide at %.0f: %v, want %v (a fully scanned /16)", rate, per, want)
		}
	}
}

func TestCheckScanPace(t *testing.T) {
	cases := []struct {
		name     string
		rate     float64
		targets  []netip.Prefix
		excluded []netip.Prefix
		ok       bool
	}{
		{"internet-wide at 1M/s", 1000000, nil, reserved(), true},
		{"internet-wide at 20M/s", 20000000, nil, reserved(), false},
		{"internet-wide unlimited", -1, nil, reserved(), false},
		{"a /16 at zmap's default", 0, pfx("203.0.0.0/16"), nil, false},
		{"a /16 at 250/s", MaxPerSlash16, pfx("203.0.0.0/16"), nil, true},
		{"a /16 at 251/s", MaxPerSlash16 + 1, pfx("203.0.0.0/16"), nil, false},
		{"a /8 at 10,000/s", 10000, pfx("12.0.0.0/8"), nil, true},
		{"the testbed /16 at 10,000/s", 10000, pfx("198.19.0.0/16"), nil, true},
		{"the testbed unlimited", -1, pfx("198.19.0.0/22"), nil, true},
		{"testbed and a real /16", 10000, pfx("198.19.0.0/16", "203.0.0.0/16"), nil, false},
		{"loopback", 10000, pfx("127.0.0.0/8"), nil, true},
	}
	for _, c := range cases {
		err := CheckScanPace(c.rate, c.targets, c.excluded)
		var pe *PaceError
		if c.ok != (err == nil) || (err != nil && (!errors.As(err, &pe) || !errors.Is(err, ErrPace) || pe.PerSlash16 <= MaxPerSlash16)) {
			t.Errorf("%s: %v", c.name, err)
		}
		if err != nil {
			t.Logf("%s: %v", c.name, err)
		}
	}
}

func TestCheckSendPace(t *testing.T) {
	lab := []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.200.1")}
	real := []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("2001:db8::1")}
	for _, c := range []struct {
		name  string
		rate  float64
		addrs []netip.Addr
		ok    bool
	}{
		{"lab at 5000/s", 5000, lab, true},
		{"real at 250/s", MaxPerSlash16, real, true},
		{"real at 1000/s", 1000, real, false},
	} {
		if err := CheckSendPace(c.rate, c.addrs); c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrPace)) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func FuzzPerSlash16(f *testing.F) {
	f.Add(uint32(0xcb000000), uint8(16), uint32(0xcb010000), uint8(17))
	f.Fuzz(func(t *testing.T, a uint32, abits uint8, b uint32, bbits uint8) {
		mk := func(v uint32, bits uint8) netip.Prefix {
			return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), int(bits%33)).Masked()
		}
		tp, ep := mk(a, abits), mk(b, bbits)
		per, _, n := PerSlash16(1000, []netip.Prefix{tp}, []netip.Prefix{ep})
		size := uint64(1) << (32 - tp.Bits())
		if n > size || per < 0 || per > 1000 {
			t.Fatalf("%s minus %s: %v per /16, %d scanned", tp, ep, per, n)
		}
		if !ep.Overlaps(tp) && n != size {
			t.Fatalf("%s minus disjoint %s: %d scanned, want %d", tp, ep, n, size)
		}
	})
}
