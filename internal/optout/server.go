package optout

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/optout/pace"
	"github.com/doqscan/doqscan/internal/store"
)

//go:embed templates/*.html
var templatesFS embed.FS

var pages = template.Must(template.ParseFS(templatesFS, "templates/*.html"))

// Info is what the page tells operators about the scans. What the tools send (ports,
// protocols, packets) is not here: the page lists Contacts, made from the code's tables.
type Info struct {
	Operator     string // who scans
	Contact      string // contact email
	Purpose      string // why
	Rate         string // probe rate
	Frequency    string // how often
	Stored       string // what is stored
	Published    string // what is published
	ProjectURL   string
	ScannerAddrs []string // the scanner's addresses, shown on the page
}

// DefaultInfo describes doqscan's own scans. Every sentence is either enforced by the
// code (the per-/16 rate: pace.CheckScanPace, pace.CheckSendPace; opt-outs: blocklist.OptOuts in
// every tool) or a description of what the code does; page_test.go holds the page to it.
var DefaultInfo = Info{
	Operator: "a DNS-over-QUIC measurement study (doqscan)",
	Contact:  "scan-abuse@example.org",
	Purpose:  "We measure how many DNS resolvers support DNS over QUIC (RFC 9250) and how fast they answer compared with DNS over UDP, TCP, TLS and HTTPS.",
	Rate: fmt.Sprintf("The scan visits the scanned addresses in a random order (zmap's random permutation), so its packets spread over the whole scanned space; "+
		"the scanner refuses to start a scan that would send more than %d probes per second on average towards any /16.", pace.MaxPerSlash16),
	Frequency: "a scan every week, verification of the hosts that answered once a week, measurements of verified DNS-over-QUIC resolvers every hour",
	Stored:    "for each address that answers: the reply's classification, advertised QUIC versions, the server certificate chain, timing of the DNS exchanges, AS number and coarse location from GeoIP databases",
	Published: NoReleaseText, // with a release: PublishedText (Server.ReleaseDir)
}

// Server serves the opt-out page.
type Server struct {
	Store        *store.Store
	BlocklistDir string
	Limits       Limits
	Info         Info
	Log          *slog.Logger
	Now          func() time.Time
	// Every request, whatever its method and path, costs a token of its source's bucket
	// (RequestsPerSecond, burst twice that) before anything else runs; a form submission
	// costs one more of a second bucket (PostsPerMinute, burst Burst). A source is an IPv4
	// address or an IPv6 /V6SourceBits. Each limiter remembers Sources sources (default
	// DefaultSources) and forgets the least recently seen one for a newcomer.
	PostsPerMinute    float64
	Burst             int
	RequestsPerSecond float64
	Sources           int
	// SecureCookies marks the CSRF cookie Secure (when served over TLS only).
	SecureCookies bool
	// ReleaseDir is the data release the page describes under "What we publish"
	// (manifest.json written by `dataset export`; PublishedText); ReleaseURL where it is
	// published (empty: on request from the contact).
	ReleaseDir string
	ReleaseURL string
	// Policy decides which requests are honoured at once (default PolicyOwnRange); under
	// own-range, OwnRange (default DefaultOwnRange) is the largest range honoured at once.
	Policy   Policy
	OwnRange Limits

	key     []byte
	reqs    *sourceLimiter
	posts   *sourceLimiter
	fileMu  sync.Mutex
	initMux sync.Once
	mux     *http.ServeMux
}

func (s *Server) init() {
	s.initMux.Do(func() {
		s.key = make([]byte, 32)
		rand.Read(s.key)
		if s.Now == nil {
			s.Now = time.Now
		}
		if s.PostsPerMinute == 0 {
			s.PostsPerMinute = 6
		}
		if s.Burst == 0 {
			s.Burst = 3
		}
		if s.RequestsPerSecond == 0 {
			s.RequestsPerSecond = 10
		}
		if s.Sources == 0 {
			s.Sources = DefaultSources
		}
		s.reqs = newSourceLimiter(s.RequestsPerSecond, max(1, int(2*s.RequestsPerSecond)), s.Sources)
		s.posts = newSourceLimiter(s.PostsPerMinute/60, s.Burst, s.Sources)
		if s.Limits == (Limits{}) {
			s.Limits = DefaultLimits
		}
		if s.Policy == "" {
			s.Policy = PolicyOwnRange
		}
		if s.OwnRange == (Limits{}) {
			s.OwnRange = DefaultOwnRange
		}
		if s.Log == nil {
			s.Log = slog.Default()
		}
		s.mux = http.NewServeMux()
		s.mux.HandleFunc("GET /{$}", s.index)
		s.mux.HandleFunc("POST /optout", s.submit)
		s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	})
}

// ServeHTTP implements http.Handler: security headers on every response, then the
// per-source limit for every request (any method, any path), before any handler runs.
// A refused request gets a short 429 and touches nothing else, the database least.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.init()
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self' 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if !s.reqs.allow(sourceOf(r.RemoteAddr), s.Now()) {
		h.Set("Retry-After", "1")
		http.Error(w, ErrRateLimited.Error(), http.StatusTooManyRequests)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// page is what the templates render.
type page struct {
	Info   Info
	Token  string
	Range  string
	Email  string
	Note   string
	Error  string
	Field  string
	Count  count
	Prefix string
	Limits Limits
	// Policy and OwnRange say what happens to a request; Source is the visitor's address as
	// the page sees it (the one own-range compares); Status and ID are a submission's.
	Policy   Policy
	OwnRange Limits
	Source   string
	Status   string
	ID       int64
	// Contacts and Ports are what the tools send (Contacts(), Ports()).
	Contacts []Contact
	Ports    string
}

// count is the number of excluded ranges as the page shows it: known, unavailable (the
// database did not answer; the page says so instead of a number), or not shown (pages
// that answer a refused submission do not query the database).
type count struct {
	N           int
	Known       bool
	Unavailable bool
}

// csrf: the cookie carries a random nonce, the form an HMAC of it under a per-process
// key. A forged cross-site POST has neither the cookie (SameSite=Strict) nor the means to
// compute the HMAC.
const csrfCookie = "doqscan_csrf"

// csrfTokenLen is the length of the form's token: a hex HMAC-SHA-256.
const csrfTokenLen = 2 * sha256.Size

func (s *Server) token(w http.ResponseWriter, r *http.Request) string {
	nonce := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 32 {
		if _, err := hex.DecodeString(c.Value); err == nil {
			nonce = c.Value
		}
	}
	if nonce == "" {
		b := make([]byte, 16)
		rand.Read(b)
		nonce = hex.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: nonce, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: s.SecureCookies, MaxAge: 3600})
	}
	return s.mac(nonce)
}

func (s *Server) mac(nonce string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(nonce))
	return hex.EncodeToString(m.Sum(nil))
}

func (s *Server) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return hmac.Equal([]byte(s.mac(c.Value)), []byte(r.PostFormValue("csrf")))
}

// countTimeout bounds the count query, so a database that hangs delays the page by at
// most this much.
const countTimeout = 3 * time.Second

func (s *Server) excluded(ctx context.Context) count {
	ctx, cancel := context.WithTimeout(ctx, countTimeout)
	defer cancel()
	var n int
	if err := s.Store.Pool.QueryRow(ctx, `SELECT count(DISTINCT prefix) FROM optout_requests WHERE status = 'accepted'`).Scan(&n); err != nil {
		s.Log.Warn("count opt-outs: the page says the count is unavailable", "err", err)
		return count{Unavailable: true}
	}
	return count{N: n, Known: true}
}

func (s *Server) render(w http.ResponseWriter, status int, name string, p page) {
	p.Contacts, p.Ports = Contacts(), Ports()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, p); err != nil {
		s.Log.Error("render", "template", name, "err", err)
	}
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "index.html", page{Info: s.info(), Token: s.token(w, r), Count: s.excluded(r.Context()),
		Limits: s.Limits, Policy: s.Policy, OwnRange: s.OwnRange, Source: peerOf(r)})
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	// Bounded before anything reads it, the refusals below included (fail echoes the form).
	r.Body = http.MaxBytesReader(w, r.Body, int64(MaxBodySize))
	if !s.posts.allow(sourceOf(r.RemoteAddr), s.Now()) {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(60/s.PostsPerMinute))))
		s.fail(w, r, http.StatusTooManyRequests, "", ErrRateLimited.Error())
		return
	}
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.fail(w, r, http.StatusRequestEntityTooLarge, "", "the request is too large")
			return
		}
		s.fail(w, r, http.StatusBadRequest, "", "the form could not be read")
		return
	}
	if !s.checkCSRF(r) {
		s.fail(w, r, http.StatusForbidden, "", "the form expired or did not come from this page; reload the page and submit again")
		return
	}
	req, err := Validate(r.PostFormValue("range"), r.PostFormValue("email"), r.PostFormValue("note"), s.Limits)
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			s.fail(w, r, http.StatusBadRequest, fe.Field, fe.Msg)
			return
		}
		s.fail(w, r, http.StatusBadRequest, "", err.Error())
		return
	}
	var source *netip.Addr
	var peer netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		peer = ap.Addr().Unmap()
		source = &peer
	}
	d := s.Policy.Decide(req.Prefix, peer, s.OwnRange)
	e, err := Submit(r.Context(), s.Store, req, source, d, "web "+addrOrUnknown(peer), s.Now().UTC())
	if err != nil {
		s.Log.Error("store opt-out", "prefix", req.Prefix, "err", err)
		s.fail(w, r, http.StatusServiceUnavailable, "", "your request could not be stored right now; please try again later or write to the contact address")
		return
	}
	if e.Status == StatusAccepted {
		if _, err := s.Rewrite(r.Context()); err != nil {
			s.Log.Error("rewrite blocklist", "err", err)
			s.fail(w, r, http.StatusServiceUnavailable, "", "your request was stored but the blocklist could not be updated; it will be applied at the latest before the next scan")
			return
		}
	}
	s.Log.Info("opt-out submitted", "id", e.ID, "prefix", req.Prefix, "status", e.Status, "source", r.RemoteAddr, "reason", d.Reason)
	s.render(w, http.StatusOK, "done.html", page{Info: s.info(), Prefix: req.Prefix.String(), Email: req.Email,
		Status: e.Status, ID: e.ID, Source: addrOrUnknown(peer), Policy: s.Policy, OwnRange: s.OwnRange,
		Count: s.excluded(r.Context())})
}

// Rewrite regenerates blocklist/optout.conf from the database.
func (s *Server) Rewrite(ctx context.Context) (string, error) {
	s.init()
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	reqs, err := Accepted(ctx, s.Store)
	if err != nil {
		return "", err
	}
	return WriteBlocklist(s.BlocklistDir, reqs, s.Now())
}

// fail answers a refused submission with the form, the visitor's input and the reason. It
// does not query the database (the count is not shown).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, field, msg string) {
	s.Log.Info("opt-out refused", "status", status, "field", field, "reason", msg, "source", r.RemoteAddr)
	s.render(w, status, "index.html", page{Info: s.info(), Token: s.token(w, r), Error: msg, Field: field,
		Range: trunc(r.PostFormValue("range"), MaxRangeLen), Email: trunc(r.PostFormValue("email"), MaxEmailLen),
		Note: trunc(r.PostFormValue("note"), MaxNoteLen), Limits: s.Limits, Policy: s.Policy, OwnRange: s.OwnRange,
		Source: peerOf(r)})
}

// peerOf returns the TCP peer's address of r, as the policy sees it.
func peerOf(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return addrOrUnknown(netip.Addr{})
	}
	return ap.Addr().Unmap().String()
}

// trunc cuts s to at most n characters, at a character boundary.
func trunc(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// ListenAndServe serves on addr until ctx ends, with timeouts that bound slow clients.
func (s *Server) ListenAndServe(ctx context.Context, addr, certFile, keyFile string) error {
	srv := &http.Server{Addr: addr, Handler: s, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx) //nolint:errcheck // shutting down: connections still open are cut
	}()
	var err error
	if certFile != "" {
		err = srv.ListenAndServeTLS(certFile, keyFile)
	} else {
		err = srv.ListenAndServe()
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
