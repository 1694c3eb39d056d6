package optout

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/optout/optouttest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

func TestPolicyDecide(t *testing.T) {
	own := DefaultOwnRange
	cases := []struct {
		policy Policy
		prefix string
		source string // "" : unknown
		want   string
	}{
		{PolicyOwnRange, "198.19.7.0/24", "198.19.7.9", StatusAccepted},
		{PolicyOwnRange, "198.19.7.9/32", "198.19.7.9", StatusAccepted},
		{PolicyOwnRange, "198.19.7.0/24", "::ffff:198.19.7.9", StatusAccepted},
		{PolicyOwnRange, "198.19.8.0/24", "198.19.7.9", StatusPending},
		{PolicyOwnRange, "198.19.0.0/16", "198.19.7.9", StatusPending}, // contains it, but larger than a /24
		{PolicyOwnRange, "198.19.7.0/24", "", StatusPending},
		{PolicyOwnRange, "2001:db8:1::/48", "2001:db8:1:2::5", StatusAccepted},
		{PolicyOwnRange, "2001:db8::/32", "2001:db8:1:2::5", StatusPending},
		{PolicyOwnRange, "2001:db8:2::/48", "2001:db8:1:2::5", StatusPending},
		{PolicyOwnRange, "198.19.7.0/24", "2001:db8:1:2::5", StatusPending},
		{PolicyAll, "198.19.8.0/24", "192.0.2.1", StatusAccepted},
		{PolicyAll, "198.19.8.0/24", "", StatusAccepted},
		{PolicyReviewAll, "198.19.7.0/24", "198.19.7.9", StatusPending},
		{PolicyReviewAll, "198.19.8.0/24", "192.0.2.1", StatusPending},
	}
	for _, c := range cases {
		var src netip.Addr
		if c.source != "" {
			src = netip.MustParseAddr(c.source)
		}
		d := c.policy.Decide(netip.MustParsePrefix(c.prefix), src, own)
		if d.Status != c.want || d.Reason == "" {
			t.Errorf("%s: %s from %q = %+v, want %s", c.policy, c.prefix, c.source, d, c.want)
		}
	}
	for _, s := range []string{"own-range", "all", "review-all"} {
		if p, err := ParsePolicy(s); err != nil || string(p) != s {
			t.Errorf("ParsePolicy(%q) = %q, %v", s, p, err)
		}
	}
	if _, err := ParsePolicy("everything"); err == nil {
		t.Error("ParsePolicy accepted an unknown policy")
	}
}

// postFrom submits the form as a browser at remote would: page (cookie, token), then POST.
func postFrom(t *testing.T, srv *Server, remote, prefix, email string) (int, string) {
	t.Helper()
	w := serve(srv, "GET", "/", remote, nil)
	m := optouttest.CSRFToken.FindStringSubmatch(w.Body.String())
	if m == nil {
		t.Fatalf("no CSRF token on the page: %.300s", w.Body.String())
	}
	form := url.Values{"csrf": {m[1]}, "range": {prefix}, "email": {email}}
	r := httptest.NewRequest("POST", "/optout", strings.NewReader(form.Encode()))
	r.RemoteAddr = remote
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range w.Result().Cookies() {
		r.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, r)
	return rec.Code, rec.Body.String()
}

func blocklistFile(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, OptOutFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Under each policy, a request from inside its range and one from outside: which are
// honoured at once (stored accepted, in optout.conf, the page confirms) and which are
// pending (stored, not in optout.conf, the page says it waits for review); one audit row
// per submission, naming the requester.
func TestSubmitUnderEachPolicy(t *testing.T) {
	const (
		inside  = "198.19.7.0/24"
		from    = "198.19.7.9:40000"
		outside = "198.19.8.0/24"
		other   = "192.0.2.1:40000"
	)
	for _, tc := range []struct {
		policy                Policy
		wantInside, wantOther string
	}{
		{PolicyOwnRange, StatusAccepted, StatusPending},
		{PolicyAll, StatusAccepted, StatusAccepted},
		{PolicyReviewAll, StatusPending, StatusPending},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			st := storetest.Open(t)
			dir := t.TempDir()
			srv := &Server{Store: st, BlocklistDir: dir, Info: DefaultInfo, Log: quiet, Policy: tc.policy}
			if _, err := srv.Rewrite(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, sub := range []struct{ prefix, remote, want string }{
				{inside, from, tc.wantInside},
				{outside, other, tc.wantOther},
			} {
				code, body := postFrom(t, srv, sub.remote, sub.prefix, "noc@example.net")
				if code != http.StatusOK {
					t.Fatalf("%s from %s: status %d: %.300s", sub.prefix, sub.remote, code, body)
				}
				id := map[string]string{StatusAccepted: `id="confirmation"`, StatusPending: `id="pending"`}[sub.want]
				if !strings.Contains(body, id) || !strings.Contains(body, sub.prefix) {
					t.Errorf("%s from %s: the page lacks %s: %.1500s", sub.prefix, sub.remote, id, body)
				}
				rows, err := List(context.Background(), st, "")
				if err != nil {
					t.Fatal(err)
				}
				var got *Entry
				for i := range rows {
					if rows[i].Prefix.String() == sub.prefix {
						got = &rows[i]
					}
				}
				if got == nil || got.Status != sub.want {
					t.Fatalf("%s from %s: stored %+v, want status %s", sub.prefix, sub.remote, got, sub.want)
				}
				host, _, _ := strings.Cut(sub.remote, ":")
				if got.SourceAddr == nil || got.SourceAddr.String() != host {
					t.Errorf("%s: source_addr %v, want %s", sub.prefix, got.SourceAddr, host)
				}
				audit, err := Audit(context.Background(), st, got.ID)
				if err != nil || len(audit) != 1 || audit[0].Action != ActionSubmitted || audit[0].ToStatus != sub.want ||
					audit[0].Actor != "web "+host || audit[0].FromStatus != nil || audit[0].Reason == "" {
					t.Errorf("%s: audit %+v, %v", sub.prefix, audit, err)
				}
				inFile := strings.Contains(blocklistFile(t, dir), "\n"+sub.prefix+" # ")
				if inFile != (sub.want == StatusAccepted) {
					t.Errorf("%s (%s): in optout.conf = %v\n%s", sub.prefix, sub.want, inFile, blocklistFile(t, dir))
				}
			}
			// Only accepted requests are excluded: what zprobe, verify and measure read.
			acc, err := Accepted(context.Background(), st)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, s := range []string{tc.wantInside, tc.wantOther} {
				if s == StatusAccepted {
					want++
				}
			}
			if len(acc) != want {
				t.Errorf("Accepted() has %d rows, want %d", len(acc), want)
			}
		})
	}
}

// The same prefix and email again is the same request: a pending one submitted again
// from inside the range is honoured; a rejected one stays rejected whatever is sent.
func TestResubmission(t *testing.T) {
	st := storetest.Open(t)
	dir := t.TempDir()
	srv := &Server{Store: st, BlocklistDir: dir, Info: DefaultInfo, Log: quiet, PostsPerMinute: 600, Burst: 50}
	ctx := context.Background()
	postFrom(t, srv, "192.0.2.1:1000", "198.19.7.0/24", "noc@example.net")
	postFrom(t, srv, "192.0.2.1:1000", "198.19.9.0/24", "noc@example.net")
	rows, _ := List(ctx, st, StatusPending)
	if len(rows) != 2 {
		t.Fatalf("pending: %+v", rows)
	}
	_, body := postFrom(t, srv, "198.19.7.200:1000", "198.19.7.0/24", "noc@example.net")
	if !strings.Contains(body, `id="confirmation"`) {
		t.Errorf("resubmitted from inside: %.1000s", body)
	}
	if _, err := Decide(ctx, st, rows[1].ID, ActionReject, "cli test", "not theirs", time.Now()); err != nil {
		t.Fatal(err)
	}
	_, body = postFrom(t, srv, "198.19.9.1:1000", "198.19.9.0/24", "noc@example.net")
	if !strings.Contains(body, `id="confirmation"`) {
		t.Errorf("a rejected request resubmitted from inside its range is honoured (own-range is proof): %.1000s", body)
	}
	if _, err := Decide(ctx, st, rows[1].ID, ActionWithdraw, "cli test", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	// Withdrawn, then resubmitted from outside: pending again. Rejected, then resubmitted
	// from outside: stays rejected.
	_, body = postFrom(t, srv, "192.0.2.1:1000", "198.19.9.0/24", "noc@example.net")
	if !strings.Contains(body, `id="pending"`) {
		t.Errorf("withdrawn, resubmitted from outside: %.1000s", body)
	}
	if _, err := Decide(ctx, st, rows[1].ID, ActionReject, "cli test", "still not theirs", time.Now()); err != nil {
		t.Fatal(err)
	}
	_, body = postFrom(t, srv, "192.0.2.1:1000", "198.19.9.0/24", "noc@example.net")
	if !strings.Contains(body, `id="decided"`) || !strings.Contains(body, "rejected") {
		t.Errorf("rejected, resubmitted from outside: %.1000s", body)
	}
	e, _ := Get(ctx, st, rows[1].ID)
	if e.Status != StatusRejected {
		t.Errorf("status %s, want rejected", e.Status)
	}
	audit, _ := Audit(ctx, st, rows[1].ID)
	var actions []string
	for _, a := range audit {
		actions = append(actions, a.Action+">"+a.ToStatus)
	}
	want := "submitted>pending rejected>rejected submitted>accepted withdrawn>withdrawn submitted>pending rejected>rejected submitted>rejected"
	if strings.Join(actions, " ") != want {
		t.Errorf("audit:\n got %s\nwant %s", strings.Join(actions, " "), want)
	}
	if _, err := srv.Rewrite(ctx); err != nil { // what optout reject/withdraw do after Decide
		t.Fatal(err)
	}
	if f := blocklistFile(t, dir); !strings.Contains(f, "198.19.7.0/24") || strings.Contains(f, "198.19.9.0") {
		t.Errorf("optout.conf:\n%s", f)
	}
}

// Decide: every allowed transition and every refused one; a refusal changes nothing and
// writes no audit row.
func TestDecideTransitions(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	now := time.Now()
	req := Request{Prefix: netip.MustParsePrefix("198.19.7.0/24"), Email: "noc@example.net"}
	e, err := Submit(ctx, st, req, nil, Decision{StatusPending, "test"}, "web (unknown)", now)
	if err != nil || e.Status != StatusPending || e.SourceAddr != nil {
		t.Fatalf("Submit: %+v, %v", e, err)
	}
	steps := []struct {
		action, want string
		ok           bool
	}{
		{ActionWithdraw, StatusWithdrawn, true},
		{ActionReject, StatusWithdrawn, false},
		{ActionWithdraw, StatusWithdrawn, false},
		{ActionAccept, StatusAccepted, true},
		{ActionAccept, StatusAccepted, false},
		{ActionReject, StatusAccepted, false},
		{ActionWithdraw, StatusWithdrawn, true},
		{ActionAccept, StatusAccepted, true},
	}
	rows := 1
	for i, s := range steps {
		got, err := Decide(ctx, st, e.ID, s.action, "cli test", "step", now)
		var te *TransitionError
		switch {
		case s.ok && err != nil, s.ok && got.Status != s.want:
			t.Fatalf("step %d %s: %+v, %v", i, s.action, got, err)
		case !s.ok && !asTransition(err, &te):
			t.Fatalf("step %d %s: err %v, want a TransitionError", i, s.action, err)
		}
		if s.ok {
			rows++
		}
		if cur, _ := Get(ctx, st, e.ID); cur.Status != s.want {
			t.Fatalf("step %d: status %s, want %s", i, cur.Status, s.want)
		}
		if a, _ := Audit(ctx, st, e.ID); len(a) != rows {
			t.Fatalf("step %d: %d audit rows, want %d", i, len(a), rows)
		}
	}
	if _, err := Decide(ctx, st, e.ID+1000, ActionAccept, "cli test", "", now); !isNoSuch(err) {
		t.Errorf("unknown id: %v", err)
	}
}

func asTransition(err error, te **TransitionError) bool { return errors.As(err, te) }

func isNoSuch(err error) bool { return errors.Is(err, ErrNoSuchRequest) }
