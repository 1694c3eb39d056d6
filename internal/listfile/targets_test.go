package listfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func endpoints(t Target) string {
	var s []string
	for _, ep := range t.Endpoints {
		e := fmt.Sprintf("%s=%d", ep.Protocol, ep.Port)
		if ep.ALPN != "" {
			e += "/" + ep.ALPN
		}
		s = append(s, e)
	}
	return strings.Join(s, " ")
}

// TestParseTarget: every spelling of an address, with and without a port (a DoQ
// port), sni= and PROTOCOL=PORT[/ALPN] endpoints; bad lines are refused with a reason.
func TestParseTarget(t *testing.T) {
	for _, c := range []struct{ line, addr, sni, eps string }{
		{"198.19.0.7", "198.19.0.7", "", ""},
		{"198.19.0.7:784", "198.19.0.7", "", "doq=784"},
		{"[2001:2::7]:8853 sni=dns.test", "2001:2::7", "dns.test", "doq=8853"},
		{"[2001:2::7]", "2001:2::7", "", ""},
		{"2001:2::7 doq=853/doq-i02 dot=853", "2001:2::7", "", "doq=853/doq-i02 dot=853"},
		{"::ffff:198.19.0.7 doudp=5353 doudp=5353", "198.19.0.7", "", "doudp=5353"},
		{"198.19.0.7:853 doq=853 sni=a.test sni=a.test", "198.19.0.7", "a.test", "doq=853"},
	} {
		got, err := ParseTarget(c.line)
		if err != nil || got.Addr.String() != c.addr || got.ServerName != c.sni || endpoints(got) != c.eps {
			t.Errorf("%q: %+v (%v); want %s sni=%q %q", c.line, got, err, c.addr, c.sni, c.eps)
		}
	}
	for _, bad := range []string{"nonsense", "198.19.0.7:0", "198.19.0.7:99999", "fe80::1%eth0", "[fe80::1%eth0]:853",
		"198.19.0.7 doq", "198.19.0.7 =53", "198.19.0.7 doq=0", "198.19.0.7 doq=x/doq", "198.19.0.7 sni=",
		"198.19.0.7 sni=198.19.0.8", "198.19.0.7 sni=a.test sni=b.test", "198.19.0.7 doq=853/doq doq=853/doq-i02",
		"198.19.0.7:853 doq=853/doq-i02"} {
		if got, err := ParseTarget(bad); err == nil {
			t.Errorf("%q accepted as %+v", bad, got)
		}
	}
}

// TestTargetsMergeLines: the lines of one address are one target, merged after each
// line was expanded (the tool's defaults per line), in the order of first appearance;
// what the merge cannot keep apart is a line error naming the later line.
func TestTargetsMergeLines(t *testing.T) {
	g := Targets{Expand: func(t Target) (Target, error) {
		if len(t.Endpoints) == 0 {
			t.Endpoints = []Endpoint{{Protocol: "doq", Port: 853}}
		}
		return t, nil
	}}
	ts, err := g.Scan(strings.NewReader("198.19.0.7:784\n198.19.0.8\n198.19.0.7 sni=dns.test\n[::ffff:198.19.0.7]:784\n"), "t.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Addr.String() != "198.19.0.7" || endpoints(ts[0]) != "doq=784 doq=853" || ts[0].ServerName != "dns.test" ||
		ts[1].Addr.String() != "198.19.0.8" || endpoints(ts[1]) != "doq=853" {
		t.Errorf("got %+v", ts)
	}
	_, err = g.Scan(strings.NewReader("198.19.0.7 sni=a.test\n# b\n198.19.0.7 sni=b.test\n"), "t.txt")
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 {
		t.Errorf("two server names: %v, want a line error at line 3", err)
	}
}

// FuzzParseTarget: whatever the line, a target that parses has a valid unmapped address
// without zone and endpoints with ports, each (protocol, port) once.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"198.19.0.7:784", "[2001:2::7]:8853 sni=dns.test doq=853/doq-i02", "::ffff:1.2.3.4 dot=853"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			return
		}
		if !tg.Addr.IsValid() || tg.Addr.Is4In6() || tg.Addr.Zone() != "" {
			t.Fatalf("%q: address %v", s, tg.Addr)
		}
		seen := map[string]bool{}
		for _, ep := range tg.Endpoints {
			k := fmt.Sprintf("%s/%d", ep.Protocol, ep.Port)
			if ep.Port == 0 || ep.Protocol == "" || seen[k] {
				t.Fatalf("%q: endpoint %+v", s, ep)
			}
			seen[k] = true
		}
	})
}
