package testbed

import "testing"

func TestPathArgs(t *testing.T) {
	good := map[string][]string{
		"set 198.19.3.7 loss=0.05":            {"set", "198.19.3.7", "--loss", "5%"},
		"set 198.19.3.0/24 loss=0.2 rtt=30ms": {"set", "198.19.3.0/24", "--loss=0.2", "--rtt", "30ms"},
		"reset":                               {"reset"},
		"reset 198.19.3.7":                    {"reset", "198.19.3.7"},
		"show":                                {"show"},
	}
	for want, args := range good {
		if got, err := PathArgs(args); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", args, got, err, want)
		}
	}
	for _, bad := range [][]string{{}, {"set"}, {"set", "1.2.3.4"}, {"set", "1.2.3.4", "--loss"},
		{"set", "1.2.3.4", "--loss", "150%"}, {"set", "1.2.3.4", "--loss", "x"}, {"set", "1.2.3.4", "--speed", "1"},
		{"set", "1.2.3.4", "--rtt", "fast"}, {"reset", "a", "b"}, {"show", "x"}, {"frob"}, {"set", "--loss", "5%"}} {
		if got, err := PathArgs(bad); err == nil {
			t.Errorf("%q: accepted as %q", bad, got)
		}
	}
}
