package testbed

import "testing"

func TestPathSetRequest(t *testing.T) {
	good := map[string][4]string{
		"set 198.19.3.7 loss=0.05":              {"198.19.3.7", "5%", "", ""},
		"set 198.19.3.0/24 loss=0.2 rtt=30ms":   {"198.19.3.0/24", "0.2", "30ms", ""},
		"set 198.19.3.0/24 rtt=80ms jitter=1ms": {"198.19.3.0/24", "", "80ms", "1ms"},
		"set 2001:2::7 loss=0 rtt=1s jitter=0s": {"2001:2::7", "0%", "1s", "0s"},
	}
	for want, a := range good {
		if got, err := PathSetRequest(a[0], a[1], a[2], a[3]); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", a, got, err, want)
		}
	}
	for _, bad := range [][4]string{{"", "5%", "", ""}, {"1.2.3.4", "", "", ""}, {"1.2.3.4", "150%", "", ""},
		{"1.2.3.4", "x", "", ""}, {"1.2.3.4", "", "fast", ""}, {"1.2.3.4", "", "", "1"}, {"--loss", "5%", "", ""}} {
		if got, err := PathSetRequest(bad[0], bad[1], bad[2], bad[3]); err == nil {
			t.Errorf("%q: accepted as %q", bad, got)
		}
	}
}
