package verify

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
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

// TestIdentifyTokensAndCloseCodes: the token lengths and close codes each testbed stack
// shows are read as features and fit its signature (the captures of a Retry, NEW_TOKEN
// frames, and the close of the verification's own handshake without ALPN).
func TestIdentifyTokensAndCloseCodes(t *testing.T) {
	cases := []struct {
		capture, want string
		noALPN        string   // capture of the handshake without ALPN ("": none)
		features      []string // each must be among Matched
	}{
		{"dnsproxy-handshake", "quic-go", "", []string{"retry_token_len=81", "new_token_len=79"}},
		{"simretry-handshake", "quic-go", "", []string{"retry_token_len=93", "new_token_len=91"}},
		{"coredns-handshake", "quic-go", "", []string{"new_token_len=91"}},
		{"sim-handshake", "quic-go", "sim-no-alpn", []string{"new_token_len=90", "no_alpn_close_code=transport 0x178"}},
		{"aioretry-handshake", "aioquic", "", []string{"retry_token_len=53"}},
		{"aioquic-handshake", "aioquic", "aioquic-no-alpn", []string{"no_alpn_close_code=transport 0x178", `alpn_close="No common ALPN protocols" crypto`}},
		{"lazydns-handshake", "quinn", "", []string{"new_token_len=46"}},
		{"hickory-handshake", "quinn", "hickory-no-alpn", []string{"no_alpn_close_code=transport 0x178"}},
		{"ngtcp2-h3", "ngtcp2", "ngtcp2-no-alpn", []string{"new_token_len=57", "no_alpn_close_code=transport 0x150"}},
	}
	for _, c := range cases {
		ev := StackEvidence{Handshake: captured(t, c.capture)}
		if c.noALPN != "" {
			ev.NoALPN = captured(t, c.noALPN)
		}
		st := Identify(ev)
		if st.Library != c.want {
			t.Errorf("%s: library %q, want %q (conflicts %v, matched %v)", c.capture, st.Library, c.want, st.Conflicts, st.Matched)
		}
		for _, f := range c.features {
			if !slices.Contains(st.Matched, f) {
				t.Errorf("%s: %s not among matched %v", c.capture, f, st.Matched)
			}
		}
	}
	// gtlsserver's DoQ handshake refused (no_application_protocol) and its close of a
	// ClientHello without ALPN name it before any probe: the verification of an h3-only
	// ngtcp2 server needs no unknown-ALPN handshake.
	ng := StackEvidence{Handshake: captured(t, "ngtcp2-unknown-alpn"), NoALPN: captured(t, "ngtcp2-no-alpn"), VN: capturedVN(t, "ngtcp2")}
	if st := Identify(ng); st.Library != "ngtcp2" {
		t.Errorf("ngtcp2 refusing DoQ and no ALPN: library %q (conflicts %v, matched %v)", st.Library, st.Conflicts, st.Matched)
	}
}

// TestIdentifyTokenOrCodeContradicts: a token length or close code another library's
// format gives contradicts the library every other feature names: unknown, never that
// library. A token not sent, or a close that is not about the ALPN, is no evidence.
func TestIdentifyTokenOrCodeContradicts(t *testing.T) {
	withView := func(name string, f func(v *qlogana.ServerView)) *qlogana.ServerView {
		v := *captured(t, name)
		f(&v)
		return &v
	}
	code := func(space string, c uint64, alert *uint64) *qlogana.Close {
		return &qlogana.Close{Initiator: "remote", Space: space, Code: &c, TLSAlert: alert}
	}
	unknown := map[string]StackEvidence{
		// aioquic's handshake with quic-go's Retry token (28 bytes longer beside its ODCID).
		"quic-go retry token at aioquic": {Handshake: withView("aioretry-handshake", func(v *qlogana.ServerView) {
			n := *v.RetryTokenLen + 28
			v.RetryTokenLen = &n
		})},
		// quic-go's handshake with quinn's NEW_TOKEN length.
		"quinn new token at quic-go": {Handshake: withView("sim-handshake", func(v *qlogana.ServerView) {
			n := 46
			v.NewTokenLen = &n
		})},
		// quinn's handshake, its unknown-ALPN probe closed with CONNECTION_REFUSED (a
		// transport code its own handshake did not get): no library answers so.
		"refused unknown alpn at quinn": {Handshake: captured(t, "hickory-handshake"), UnknownALPN: withView("hickory-unknown-alpn", func(v *qlogana.ServerView) {
			v.Close = code("transport", 0x2, nil)
		})},
		// ngtcp2's no-ALPN close (internal_error) at a quic-go server.
		"ngtcp2 no-alpn close at quic-go": {Handshake: captured(t, "sim-unknown-alpn"), NoALPN: captured(t, "ngtcp2-no-alpn"), VN: capturedVN(t, "quic-go")},
	}
	for name, ev := range unknown {
		if st := Identify(ev); st.Library != LibraryUnknown || !strings.Contains(strings.Join(st.Conflicts, "; "), "no signature fits") {
			t.Errorf("%s: library %q (matched %v, conflicts %v), want unknown: no signature fits", name, st.Library, st.Matched, st.Conflicts)
		}
	}
	alert := func(a uint64) *uint64 { return &a }
	still := map[string]struct {
		ev   StackEvidence
		want string
	}{
		// hickory sends no NEW_TOKEN and no Retry: nothing to contradict.
		"no token": {StackEvidence{Handshake: captured(t, "hickory-handshake")}, "quinn"},
		// The probe closed with unrecognized_name (0x170): it lacked SNI, the server's
		// configuration; not its answer to the ALPN.
		"sni alert on the probe": {StackEvidence{Handshake: captured(t, "sim-handshake"), UnknownALPN: withView("sim-unknown-alpn", func(v *qlogana.ServerView) {
			v.Close = code("transport", 0x170, alert(112))
		})}, "quic-go"},
		// A server that closes every handshake with CONNECTION_REFUSED says nothing of
		// how it refuses an ALPN.
		"refused alike": {StackEvidence{
			Handshake: withView("sim-handshake", func(v *qlogana.ServerView) { v.Close = code("transport", 0x2, nil) }),
			UnknownALPN: withView("sim-unknown-alpn", func(v *qlogana.ServerView) {
				v.Close = code("transport", 0x2, nil)
			})}, "quic-go"},
	}
	for name, c := range still {
		if st := Identify(c.ev); st.Library != c.want {
			t.Errorf("%s: library %q (matched %v, conflicts %v), want %s", name, st.Library, st.Matched, st.Conflicts, c.want)
		}
	}
	// 0x178 is every library's answer: it confirms none. quinn's probe close alone shows
	// its connection ID length and reason: two features, not three.
	st := Identify(StackEvidence{UnknownALPN: captured(t, "hickory-unknown-alpn")})
	if st.Library != LibraryUnknown || !slices.Contains(st.Conflicts, "quinn: only 2 feature(s) shown") {
		t.Errorf("quinn's probe close alone: library %q (matched %v, conflicts %v), want unknown, only 2 features", st.Library, st.Matched, st.Conflicts)
	}
}
