package optout

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/optout/optouttest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		rng, email, note string
		want             string // prefix, or the field that must be refused
	}{
		{"192.0.2.7", "noc@example.net", "", "192.0.2.7/32"},
		{" 192.0.2.99/24 ", "noc@example.net", "thanks", "192.0.2.0/24"},
		{"2001:db8::1", "noc@example.net", "", "2001:db8::1/128"},
		{"2001:db8:1::/48", "noc@example.net", "", "2001:db8:1::/48"},
		{"::ffff:192.0.2.1/128", "noc@example.net", "", "192.0.2.1/32"},
		{"198.19.0.0/16", "a@b.example", "", "198.19.0.0/16"},
		{"10.0.0.0/8", "noc@example.net", "", "range"},
		{"2001:db8::/16", "noc@example.net", "", "range"},
		{"not an address", "noc@example.net", "", "range"},
		{"", "noc@example.net", "", "range"},
		{"192.0.2.1/33", "noc@example.net", "", "range"},
		{"fe80::1%eth0", "noc@example.net", "", "range"},
		{strings.Repeat("1", 100), "noc@example.net", "", "range"},
		{"192.0.2.1", "", "", "email"},
		{"192.0.2.1", "not-an-email", "", "email"},
		{"192.0.2.1", "Name <noc@example.net>", "", "email"},
		{"192.0.2.1", "noc@localhost", "", "email"},
		{"192.0.2.1", strings.Repeat("a", 250) + "@x.example", "", "email"},
		{"192.0.2.1", "noc@example.net", "<script>alert(1)</script>", "note"},
		{"192.0.2.1", "noc@example.net", "see <b>this</b>", "note"},
		{"192.0.2.1", "noc@example.net", "javascript:alert(1)", "note"},
		{"192.0.2.1", "noc@example.net", strings.Repeat("x", MaxNoteLen+1), "note"},
		{"192.0.2.1", "noc@example.net", "bell\x07", "note"},
		{"192.0.2.1", "noc@example.net", "\xff\xfe", "note"},
		// What an operator reads must read as what it is: no bidi override, no homoglyph
		// domain (a Cyrillic а in a Latin label), no invisible characters.
		{"192.0.2.1", "d\u202e@example.net", "", "email"},
		{"192.0.2.1", "noc@ex\u0430mple.net", "", "email"},
		{"192.0.2.1", "noc@\u0440\u0430ypal.com", "", "email"},
		{"192.0.2.1", "noc@exa\u200bmple.net", "", "email"},
		{"192.0.2.1", "noc@example.net\u202e", "", "email"},
		{"192.0.2.1", "n\u00f6c@example.net", "", "email"},
		{"192.0.2.1", "noc@-example.net", "", "email"},
		{"192.0.2.1", "noc@example.net", "fine \u202eten\u202c", "note"},
		{"192.0.2.1", "noc@example.net", "isolate \u2066x\u2069", "note"},
		{"192.0.2.1", "noc@example.net", "mark \u200f", "note"},
		{"192.0.2.1", "noc@example.net", "zero\u200bwidth", "note"},
		{"192.0.2.1", "noc@example.net", "line\u2028separator", "note"},
		{"192.0.2.1", "noc@example.net", "private \ue000", "note"},
		{"192.0.2.1", "noc@example.net", "escape \x1b[31m", "note"},
	}
	for _, c := range cases {
		r, err := Validate(c.rng, c.email, c.note, DefaultLimits)
		if strings.Contains(c.want, "/") {
			if err != nil || r.Prefix.String() != c.want {
				t.Errorf("Validate(%q, %q): %v, %v; want %s", c.rng, c.email, r.Prefix, err, c.want)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.want {
			t.Errorf("Validate(%q, %q, %q) = %v; want refusal of field %s", c.rng, c.email, c.note, err, c.want)
		}
	}
}

// TestValidateEmailDomains: an internationalised domain is accepted when it is a valid
// IDNA2008 name with each label in one writing system, and kept in its ASCII form, so
// that optout list and optout.conf show xn-- labels rather than letters that may look
// like others; a note in any script (joiners included) is kept as written.
func TestValidateEmailDomains(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"noc@example.net", "noc@example.net"},
		{"NOC@Example.NET", "NOC@example.net"},
		{"noc@b\u00fccher.de", "noc@xn--bcher-kva.de"},
		{"noc@\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444", "noc@xn--e1afmkfd.xn--p1ai"},
		{"noc@\u65e5\u672c\u8a9e\u30c9\u30e1\u30a4\u30f3.jp", "noc@xn--eckwd4c7c5976acvb2w6i.jp"},
	} {
		r, err := Validate("192.0.2.1", c.in, "", DefaultLimits)
		if err != nil || r.Email != c.want {
			t.Errorf("Validate(email %q) = %q, %v; want %q", c.in, r.Email, err, c.want)
		}
	}
	note := "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645 \u2014 merci, \u0434\u044f\u043a\u0443\u044e\n\tline two"
	if r, err := Validate("192.0.2.1", "noc@example.net", note, DefaultLimits); err != nil || r.Note != note {
		t.Errorf("note %q: %q, %v", note, r.Note, err)
	}
}

func FuzzValidate(f *testing.F) {
	f.Add("192.0.2.0/24", "noc@example.net", "note")
	f.Add("::/0", "a@b", "<")
	f.Add("192.0.2.1", "d\u202e@example.net", "x\u2066y")
	f.Add("192.0.2.1", "noc@ex\u0430mple.net", "")
	f.Add("192.0.2.1", "noc@b\u00fccher.de", "\u200c")
	f.Fuzz(func(t *testing.T, rng, email, note string) {
		r, err := Validate(rng, email, note, DefaultLimits)
		if err != nil {
			return
		}
		if !r.Prefix.IsValid() || r.Prefix != r.Prefix.Masked() || strings.ContainsAny(r.Note+r.Email, "<>") {
			t.Fatalf("accepted %+v", r)
		}
		for _, c := range r.Email {
			if c <= ' ' || c > '~' {
				t.Fatalf("accepted an email with %U: %+v", c, r)
			}
		}
		if err := CheckText("note", r.Note, true); err != nil {
			t.Fatalf("accepted a note that CheckText refuses (%v): %+v", err, r)
		}
		min := DefaultLimits.MinBitsV4
		if r.Prefix.Addr().Is6() {
			min = DefaultLimits.MinBitsV6
		}
		if r.Prefix.Bits() < min {
			t.Fatalf("accepted an oversized prefix %s", r.Prefix)
		}
	})
}

func TestWriteBlocklistIsZmapFormat(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	reqs := []store.OptOutRequest{
		{Prefix: netip.MustParsePrefix("192.0.2.0/24"), Email: "a@example.net", CreatedAt: now},
		{Prefix: netip.MustParsePrefix("192.0.2.0/24"), Email: "b@example.net", CreatedAt: now.Add(time.Hour)},
		{Prefix: netip.MustParsePrefix("2001:db8::/48"), Email: "evil\n0.0.0.0/0@x", CreatedAt: now},
	}
	path, err := WriteBlocklist(dir, reqs, now)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var cidrs []string
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			if _, err := netip.ParsePrefix(line); err != nil {
				t.Errorf("line %q is not a CIDR", line)
			}
			cidrs = append(cidrs, line)
		}
	}
	if strings.Join(cidrs, ",") != "192.0.2.0/24,2001:db8::/48" {
		t.Errorf("CIDRs = %v", cidrs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func newTestServer(t *testing.T) (*Server, *httptest.Server, string) {
	st := storetest.Open(t)
	dir := t.TempDir()
	// PolicyAll: these tests are about the form and its limits; policy_test.go covers the
	// policies (internal/optout/e2e's browser test runs the default, own-range).
	srv := &Server{Store: st, BlocklistDir: dir, Info: DefaultInfo, PostsPerMinute: 600, Burst: 50, Policy: PolicyAll,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, hs, dir
}

func TestSubmitStoresAndWritesBlocklist(t *testing.T) {
	srv, hs, dir := newTestServer(t)
	c := optouttest.NewClient(t, hs.URL)
	code, body := c.Post(url.Values{"csrf": {c.Token()}, "range": {"198.19.7.0/24"}, "email": {"noc@example.net"},
		"note": {"please exclude"}})
	if code != http.StatusOK || !strings.Contains(body, `id="confirmation"`) {
		t.Fatalf("status %d, body %s", code, body)
	}
	// The same request again adds nothing.
	c.Post(url.Values{"csrf": {c.Token()}, "range": {"198.19.7.0/24"}, "email": {"noc@example.net"}})
	reqs, err := Accepted(context.Background(), srv.Store)
	if err != nil || len(reqs) != 1 || reqs[0].Prefix.String() != "198.19.7.0/24" {
		t.Fatalf("stored %v, %v", reqs, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, OptOutFile))
	if !strings.Contains(string(b), "198.19.7.0/24 # ") || !strings.Contains(string(b), "noc@example.net") {
		t.Errorf("blocklist file:\n%s", b)
	}
}

func TestSubmitRefusals(t *testing.T) {
	srv, hs, _ := newTestServer(t)
	c := optouttest.NewClient(t, hs.URL)
	cases := []struct {
		name string
		form url.Values
		code int
		msg  string
	}{
		{"no csrf", url.Values{"range": {"198.19.1.0/24"}, "email": {"noc@example.net"}}, 403, "reload the page"},
		{"forged csrf", url.Values{"csrf": {strings.Repeat("ab", 32)}, "range": {"198.19.1.0/24"}, "email": {"noc@example.net"}}, 403, "reload the page"},
		{"not an address", url.Values{"csrf": {c.Token()}, "range": {"example.com"}, "email": {"noc@example.net"}}, 400, "not an IP address"},
		{"too large", url.Values{"csrf": {c.Token()}, "range": {"0.0.0.0/0"}, "email": {"noc@example.net"}}, 400, "prefix too large"},
		{"script", url.Values{"csrf": {c.Token()}, "range": {"198.19.1.0/24"}, "email": {"noc@example.net"}, "note": {"<script>x</script>"}}, 400, "HTML or script"},
		{"bad email", url.Values{"csrf": {c.Token()}, "range": {"198.19.1.0/24"}, "email": {"<b>@x"}}, 400, "not an email"},
		{"huge body", url.Values{"csrf": {c.Token()}, "range": {"198.19.1.0/24"}, "email": {"noc@example.net"}, "note": {strings.Repeat("x", MaxBodySize)}}, 413, "too large"},
	}
	for _, tc := range cases {
		code, body := c.Post(tc.form)
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("%s: status %d, want %d with %q; body %.300s", tc.name, code, tc.code, tc.msg, body)
		}
		if strings.Contains(body, "<script>x") {
			t.Errorf("%s: page reflects the script unescaped", tc.name)
		}
	}
	if reqs, _ := Accepted(context.Background(), srv.Store); len(reqs) != 0 {
		t.Errorf("refused requests were stored: %v", reqs)
	}
	// A cross-site POST carries a foreign Origin.
	req, _ := http.NewRequest("POST", hs.URL+"/optout", strings.NewReader("range=198.19.1.0/24"))
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("cross-origin POST: status %d", resp.StatusCode)
	}
}

func TestRateLimitPerSource(t *testing.T) {
	srv, hs, _ := newTestServer(t)
	srv.PostsPerMinute, srv.Burst = 1, 2
	c := optouttest.NewClient(t, hs.URL)
	var limited int
	for i := 0; i < 5; i++ {
		code, _ := c.Post(url.Values{"csrf": {c.Token()}, "range": {"198.19.9.0/24"}, "email": {"noc@example.net"}})
		if code == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited != 3 {
		t.Errorf("%d of 5 posts were rate-limited, want 3 (burst 2)", limited)
	}
}

func TestRewriteBeforeServing(t *testing.T) {
	st := storetest.Open(t)
	srv := &Server{Store: st, BlocklistDir: t.TempDir()}
	if _, err := srv.Rewrite(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSecurityHeadersAndNoThirdPartyAssets(t *testing.T) {
	_, hs, _ := newTestServer(t)
	resp, err := http.Get(hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers: %v", resp.Header)
	}
	for _, m := range regexp.MustCompile(`(?i)(src|href)="([^"]+)"`).FindAllStringSubmatch(string(b), -1) {
		if strings.HasPrefix(m[2], "http") {
			t.Errorf("third-party asset %s", m[2])
		}
	}
}
