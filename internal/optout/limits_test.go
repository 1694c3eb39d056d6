package optout

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doqscan/doqscan/internal/optout/optouttest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// queryCounter counts the statements a pool sends to PostgreSQL (queries and COPY).
type queryCounter struct {
	mu  sync.Mutex
	sql []string
}

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	c.sql = append(c.sql, d.SQL)
	c.mu.Unlock()
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *queryCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	c.mu.Lock()
	c.sql = append(c.sql, "COPY "+d.TableName.Sanitize())
	c.mu.Unlock()
	return ctx
}

func (c *queryCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (c *queryCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sql
	c.sql = nil
	return s
}

// countedStore opens a fresh test database (real PostgreSQL, schema applied) through a pool
// whose every statement is counted.
func countedStore(t *testing.T) (*store.Store, *queryCounter, string) {
	t.Helper()
	st, u := storetest.OpenURL(t)
	st.Close()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	qc := &queryCounter{}
	cfg.ConnConfig.Tracer = qc
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &store.Store{Pool: pool}, qc, u
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixedClock stops the limiters' time, so no token comes back during a test.
func fixedClock() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }

// serve runs one request through the handler as if it came from remote.
func serve(h http.Handler, method, target, remote string, body io.Reader) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, body)
	r.RemoteAddr = remote
	if body != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A flood from more distinct sources than the limiter remembers does not lock out the
// next visitor: the page loads, with a CSRF token, and the opt-out goes through.
func TestFloodOfSourcesDoesNotLockOutNewcomers(t *testing.T) {
	srv, hs, _ := newTestServer(t)
	for i := range DefaultSources + 1 {
		remote := net.JoinHostPort(net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String(), "40000")
		if code := serve(srv, "GET", "/healthz", remote, nil).Code; code != http.StatusOK {
			t.Fatalf("flood source %d: status %d", i, code)
		}
	}
	c := optouttest.NewClient(t, hs.URL)
	code, body := c.Post(url.Values{"csrf": {c.Token()}, "range": {"198.19.70.0/24"}, "email": {"noc@example.net"}})
	if code != http.StatusOK || !strings.Contains(body, `id="confirmation"`) {
		t.Fatalf("newcomer after a flood of %d sources: status %d, body %.300s", DefaultSources+1, code, body)
	}
}

// IPv6 sources are /56 prefixes: another /64 of the same /56 shares the bucket, another
// /56 does not.
func TestRateLimitIPv6BySlash56(t *testing.T) {
	srv, _, _ := newTestServer(t)
	srv.Now = fixedClock
	burst := 20 // twice the default 10 requests per second
	for i := range burst {
		if code := serve(srv, "GET", "/healthz", "[2001:db8:5:a00::1]:1000", nil).Code; code != http.StatusOK {
			t.Fatalf("request %d of the burst: status %d", i, code)
		}
	}
	if code := serve(srv, "GET", "/healthz", "[2001:db8:5:aff:1::2]:1000", nil).Code; code != http.StatusTooManyRequests {
		t.Errorf("another /64 of the same /56 after the burst: status %d, want 429", code)
	}
	if code := serve(srv, "GET", "/healthz", "[2001:db8:5:b00::1]:1000", nil).Code; code != http.StatusOK {
		t.Errorf("another /56: status %d, want 200", code)
	}
}

// Every method and path counts against the source's budget, and once it is spent every
// method is refused, without a database query.
func TestEveryMethodIsRateLimitedWithoutDatabase(t *testing.T) {
	st, qc, _ := countedStore(t)
	srv := &Server{Store: st, BlocklistDir: t.TempDir(), Info: DefaultInfo, Log: quiet, Now: fixedClock}
	const remote = "192.0.2.50:5000"
	// The budget (burst 20) is spent by HEAD and other methods alone.
	methods := []string{"HEAD", "OPTIONS", "PUT", "DELETE", "PATCH", "TRACE", "PROPFIND", "CONNECT"}
	served := 0
	for i := 0; i < 40; i++ {
		m := methods[i%len(methods)]
		if code := serve(srv, m, "/", remote, nil).Code; code != http.StatusTooManyRequests {
			served++
		}
	}
	if served != 20 {
		t.Errorf("%d of 40 HEAD/OPTIONS/... requests served, want 20 (the burst)", served)
	}
	qc.take()
	for _, m := range append(methods, "GET", "POST") {
		target := "/"
		if m == "POST" {
			target = "/optout"
		}
		if code := serve(srv, m, target, remote, nil).Code; code != http.StatusTooManyRequests {
			t.Errorf("%s %s after the budget is spent: status %d, want 429", m, target, code)
		}
	}
	if q := qc.take(); len(q) != 0 {
		t.Errorf("refused requests ran %d queries: %q", len(q), q)
	}
	// HEAD of the page from a fresh source is served (and counts the opt-outs).
	if code := serve(srv, "HEAD", "/", "192.0.2.51:5000", nil).Code; code != http.StatusOK {
		t.Errorf("HEAD / from a fresh source: status %d", code)
	}
	if q := qc.take(); len(q) != 1 || !strings.Contains(q[0], "optout_requests") {
		t.Errorf("a served page ran %q; want the one count query (is the counter counting?)", q)
	}
}

// A refused form submission (rate limit, CSRF, validation) answers without a query.
func TestRefusedSubmissionsDoNotQueryTheDatabase(t *testing.T) {
	st, qc, _ := countedStore(t)
	srv := &Server{Store: st, BlocklistDir: t.TempDir(), Info: DefaultInfo, Log: quiet, Now: fixedClock,
		PostsPerMinute: 1, Burst: 1}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	c := optouttest.NewClient(t, hs.URL)
	tok := c.Token()
	qc.take()
	for _, tc := range []struct {
		name string
		form url.Values
		code int
	}{
		{"no csrf", url.Values{"range": {"198.19.1.0/24"}, "email": {"noc@example.net"}}, 403},
		{"rate-limited", url.Values{"csrf": {tok}, "range": {"198.19.1.0/24"}, "email": {"noc@example.net"}}, 429},
		{"rate-limited again", url.Values{"csrf": {tok}, "range": {"x"}, "email": {"noc@example.net"}}, 429},
	} {
		code, body := c.Post(tc.form)
		if code != tc.code {
			t.Errorf("%s: status %d, want %d; body %.200s", tc.name, code, tc.code, body)
		}
		if q := qc.take(); len(q) != 0 {
			t.Errorf("%s: the refusal ran %d queries: %q", tc.name, len(q), q)
		}
	}
}

// stopDatabase makes the test database refuse connections and ends the open ones, as a
// server going down does for this database; the returned function brings it back.
func stopDatabase(t *testing.T, dbURL string) (restart func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	err = conn.QueryRow(ctx, "SELECT current_database()").Scan(&name)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, storetest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS true"); err != nil {
			t.Fatal(err)
		}
	}
}

func getPage(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	w := serve(h, "GET", "/", "192.0.2.60:6000", nil)
	return w.Code, w.Body.String()
}

// With the database down the page says the count is unavailable, never "0", and still
// tells the visitor how to opt out: the form and the contact address.
func TestDatabaseDownPageSaysCountUnavailable(t *testing.T) {
	st, _, u := countedStore(t)
	srv := &Server{Store: st, BlocklistDir: t.TempDir(), Info: DefaultInfo, Log: quiet}
	code, body := getPage(t, srv)
	if code != 200 || !strings.Contains(body, `<span id="excluded">0</span>`) {
		t.Fatalf("database up: status %d, body %.300s", code, body)
	}
	restart := stopDatabase(t, u)
	code, body = getPage(t, srv)
	checkUnavailablePage(t, "database stopped", code, body)
	restart()
	if code, body = getPage(t, srv); !strings.Contains(body, `<span id="excluded">0</span>`) {
		t.Errorf("database back: status %d, no count in %.300s", code, body)
	}

	// A server whose database was never reachable: a closed port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	pool, err := pgxpool.New(context.Background(), "postgres://doqscan@127.0.0.1:"+strconv.Itoa(port)+"/doqscan?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	closed := &Server{Store: &store.Store{Pool: pool}, BlocklistDir: t.TempDir(), Info: DefaultInfo, Log: quiet}
	code, body = getPage(t, closed)
	checkUnavailablePage(t, "closed port", code, body)
}

func checkUnavailablePage(t *testing.T, name string, code int, body string) {
	t.Helper()
	if code != http.StatusOK {
		t.Errorf("%s: status %d", name, code)
	}
	if strings.Contains(body, `id="excluded"`) || strings.Contains(body, "0 range") || strings.Contains(body, ">0<") {
		t.Errorf("%s: the page shows a count: %.2000s", name, body)
	}
	for _, want := range []string{`id="count-unavailable"`, "unavailable", `id="optout-form"`, `name="csrf" value="`,
		`href="mailto:` + DefaultInfo.Contact + `"`} {
		if !strings.Contains(body, want) {
			t.Errorf("%s: the page lacks %q", name, want)
		}
	}
}

// The largest valid form fits the body limit: 2,000 characters of a 3-byte or a 4-byte
// script in the note, the longest email; one byte over the limit is refused with 413.
func TestBodyLimitFitsTheLargestValidForm(t *testing.T) {
	srv, hs, _ := newTestServer(t)
	c := optouttest.NewClient(t, hs.URL)
	email := strings.Repeat("n", MaxEmailLen-len("@example.net")) + "@example.net"
	for i, tc := range []struct{ name, char string }{
		{"3-byte script (Devanagari)", "क"},
		{"3-byte script (CJK)", "語"},
		{"4-byte script (Gothic)", "𐌰"},
		{"4-byte script (CJK Extension B)", "𠀀"},
	} {
		note := strings.Repeat(tc.char, MaxNoteLen)
		rng := "2001:0db8:" + strconv.Itoa(1000+i) + ":0000:0000:0000:0000:0000/128"
		form := url.Values{"csrf": {c.Token()}, "range": {rng}, "email": {email}, "note": {note}}
		size := len(form.Encode())
		code, body := c.Post(form)
		if code != http.StatusOK || !strings.Contains(body, `id="confirmation"`) {
			t.Errorf("%s: a %d-byte form: status %d, body %.300s", tc.name, size, code, body)
			continue
		}
		if size > MaxBodySize {
			t.Errorf("%s: the form has %d bytes, over MaxBodySize %d, yet was accepted", tc.name, size, MaxBodySize)
		}
	}
	// The limit is the worst case exactly: every field at its length in characters that
	// URL-encode to the most bytes.
	worst := url.Values{"csrf": {strings.Repeat("a", csrfTokenLen)}, "range": {strings.Repeat(":", MaxRangeLen)},
		"email": {strings.Repeat("/", MaxEmailLen)}, "note": {strings.Repeat("𐌰", MaxNoteLen)}}
	if n := len(worst.Encode()); n != MaxBodySize {
		t.Errorf("the worst-case form encodes to %d bytes, MaxBodySize is %d", n, MaxBodySize)
	}
	reqs, err := Accepted(context.Background(), srv.Store)
	if err != nil || len(reqs) != 4 {
		t.Fatalf("stored %d requests, %v; want 4", len(reqs), err)
	}
	for _, r := range reqs {
		if n := len([]rune(r.Note)); n != MaxNoteLen {
			t.Errorf("%s: stored note of %d characters, want %d", r.Prefix, n, MaxNoteLen)
		}
	}

	// A body of exactly MaxBodySize bytes is read (and refused for its content); one more
	// byte is refused as too large.
	tok := c.Token()
	for _, extra := range []int{0, 1} {
		prefix := url.Values{"csrf": {tok}, "range": {"198.19.1.0/24"}, "email": {"noc@example.net"}}.Encode() + "&note="
		body := prefix + strings.Repeat("x", MaxBodySize+extra-len(prefix))
		resp, err := c.HTTP.Post(hs.URL+"/optout", "application/x-www-form-urlencoded", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want, msg := http.StatusBadRequest, "longer than"
		if extra > 0 {
			want, msg = http.StatusRequestEntityTooLarge, "too large"
		}
		if resp.StatusCode != want || !strings.Contains(string(b), msg) {
			t.Errorf("body of %d bytes (limit %d): status %d, want %d with %q", len(body), MaxBodySize, resp.StatusCode, want, msg)
		}
	}
}

// countingReader counts the bytes a handler reads from a request body.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A refused submission reads no more of the body than the limit, whatever its reason.
func TestRefusedSubmissionReadsAtMostTheBodyLimit(t *testing.T) {
	st, _, _ := countedStore(t)
	srv := &Server{Store: st, BlocklistDir: t.TempDir(), Info: DefaultInfo, Log: quiet, Now: fixedClock,
		PostsPerMinute: 1, Burst: 1}
	for _, want := range []int{http.StatusRequestEntityTooLarge, http.StatusTooManyRequests} {
		body := &countingReader{r: strings.NewReader("note=" + strings.Repeat("x", 1<<20))}
		if code := serve(srv, "POST", "/optout", "192.0.2.70:7000", body).Code; code != want {
			t.Errorf("status %d, want %d", code, want)
		}
		if body.n > MaxBodySize+1 {
			t.Errorf("a refused (%d) submission read %d bytes of the body, limit %d", want, body.n, MaxBodySize)
		}
	}
}
