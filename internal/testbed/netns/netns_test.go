package netns

import (
	"testing"
)

func TestNames(t *testing.T) {
	in, err := New("abcdefghij", MaxVantages)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < in.Vantages; i++ {
		for _, n := range []string{in.VantageIf(i), in.RouterIf(i), in.RouterInetIf(), in.InetIf()} {
			if len(n) > 15 {
				t.Errorf("interface name %q longer than 15 bytes", n)
			}
		}
	}
	if in.Vantage(0) != "abcdefghij-vantage" || in.Vantage(1) != "abcdefghij-vantage2" {
		t.Errorf("vantage names %q %q", in.Vantage(0), in.Vantage(1))
	}
	if VantageAddr(1).String() != "198.18.1.2" {
		t.Errorf("vantage 1 address %v", VantageAddr(1))
	}
	for _, bad := range []string{"", "A", "1ab", "abcdefghijk", "a-b", "a b"} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) accepted", bad)
		}
	}
}

// TestUpDown builds an instance twice (idempotence), checks the routes, then removes it
// and checks nothing is left. The delay line is not running, so only router-local
// traffic is checked here; end-to-end paths are tested in package testbed.
func TestCheckRoute(t *testing.T) {
	for _, c := range []struct {
		family, line string
		ok           bool
	}{
		{"-4", "198.19.0.0/16 via 198.18.0.1 dev dq-v0", true},
		{"-4", "local 198.19.0.0/16 dev lo table local proto kernel scope host", true},
		{"-4", "broadcast 127.255.255.255 dev lo table local proto kernel scope link src 127.0.0.1", true},
		{"-4", "default via 10.0.0.1 dev eth0", false},
		{"-4", "10.0.0.0/8 dev eth0", false},
		{"-4", "198.18.0.0/14 dev x", false},
		{"-6", "2001:2:0:8000::/49 via 2001:2::1 dev dq-v0 metric 1024 pref medium", true},
		{"-6", "local 2001:2:0:8000::/49 dev lo table local metric 1024 pref medium", true},
		{"-6", "anycast 2001:2:: dev dq-v0 table local proto kernel metric 0 pref medium", true},
		{"-6", "fe80::/64 dev dq-v0 proto kernel metric 256 pref medium", true},
		{"-6", "local fe80::d9:ff:fe00:2 dev dq-v0 table local proto kernel metric 0 pref medium", true},
		{"-6", "multicast ff00::/8 dev dq-v0 table local proto kernel metric 256 pref medium", true},
		{"-6", "local ::1 dev lo table local proto kernel metric 0 pref medium", true},
		{"-6", "default via fe80::1 dev eth0 proto ra metric 1024", false},
		{"-6", "2001:2::/47 dev x", false},
		{"-6", "2001:db8::/32 dev x", false},
		{"-6", "::ffff:0.0.0.0/96 dev x", false},
		{"-6", "fe80::/10 dev x", false},
	} {
		if err := checkRoute(c.family, c.line); (err == nil) != c.ok {
			t.Errorf("%s %q: %v, want ok=%v", c.family, c.line, err, c.ok)
		}
	}
}
