package verify

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/probe"
)

// captured reads what a real server's qlog (testdata/stacks, recorded by quic-go's
// client against the testbed's servers) shows of it.
func captured(t *testing.T, name string) *qlogana.ServerView {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "stacks", name+".sqlog"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := qlogana.Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	v := tr.Server()
	return &v
}

// capturedVN reads a real Version Negotiation packet's version list
// (internal/probe/testdata/peervn).
func capturedVN(t *testing.T, stack string) []uint32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "probe", "testdata", "peervn", stack+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	vn, err := probe.ParseVN(b)
	if err != nil {
		t.Fatalf("%s: %v", stack, err)
	}
	return vn.Versions
}

// TestIdentifyEveryTestbedStack labels the captures of every implementation the testbed
// runs: simserver, CoreDNS and dnsproxy (quic-go) agree; hickory is quinn, the aioquic
// example (with and without Retry) aioquic, gtlsserver ngtcp2. Each must hold from the
// handshake alone, from the unknown-ALPN probe with the VN list, and from all three.
func TestIdentifyEveryTestbedStack(t *testing.T) {
	cases := []struct{ capture, vn, want string }{
		{"sim", "quic-go", "quic-go"},
		{"coredns", "quic-go", "quic-go"},
		{"dnsproxy", "quic-go", "quic-go"},
		{"hickory", "quinn", "quinn"},
		{"aioquic", "aioquic", "aioquic"},
		{"aioretry", "aioquic", "aioquic"},
		{"ngtcp2", "ngtcp2", "ngtcp2"},
	}
	for _, c := range cases {
		hs, unk, vn := captured(t, c.capture+"-handshake"), captured(t, c.capture+"-unknown-alpn"), capturedVN(t, c.vn)
		for name, ev := range map[string]StackEvidence{
			"all":             {Handshake: hs, UnknownALPN: unk, VN: vn},
			"handshake":       {Handshake: hs},
			"unknown-alpn+vn": {UnknownALPN: unk, VN: vn},
			"handshake+vn":    {Handshake: hs, VN: vn},
			"handshake+probe": {Handshake: hs, UnknownALPN: unk},
		} {
			st := Identify(ev)
			if st.Library != c.want {
				t.Errorf("%s (%s): library %q, want %q (conflicts %v, matched %v)", c.capture, name, st.Library, c.want, st.Conflicts, st.Matched)
			}
			if len(st.Matched) < minMatches {
				t.Errorf("%s (%s): matched %v", c.capture, name, st.Matched)
			}
		}
	}
}

// TestIdentifyNeverGuesses: evidence that fits no signature, fits too little of one, or
// mixes two stacks is unknown, with the reason.
func TestIdentifyNeverGuesses(t *testing.T) {
	quicgo, quinnClose := captured(t, "coredns-handshake"), captured(t, "hickory-unknown-alpn")
	cases := map[string]struct {
		ev   StackEvidence
		want string // in Conflicts
	}{
		"nothing":          {StackEvidence{}, "no feature shown"},
		"vn only":          {StackEvidence{VN: capturedVN(t, "quic-go")}, "only 1 feature"},
		"two stacks mixed": {StackEvidence{Handshake: quicgo, UnknownALPN: quinnClose}, "no signature fits"},
		// A quic-go server whose application changed a library default it matches on
		// (its stream receive window) fits quic-go no more: unknown, not quic-go.
		"changed default": {StackEvidence{Handshake: func() *qlogana.ServerView {
			v := *captured(t, "sim-handshake")
			v.Params = maps.Clone(v.Params)
			v.Params["initial_max_stream_data_bidi_local"] = json.RawMessage("1048576")
			return &v
		}()}, "no signature fits"},
	}
	for name, c := range cases {
		st := Identify(c.ev)
		if st.Library != LibraryUnknown {
			t.Errorf("%s: library %q (matched %v), want unknown", name, st.Library, st.Matched)
			continue
		}
		if !strings.Contains(strings.Join(st.Conflicts, "; "), c.want) {
			t.Errorf("%s: conflicts %v, want one saying %q", name, st.Conflicts, c.want)
		}
	}
}
