package optout

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/doqscan/doqscan/internal/store"
)

//go:embed templates/*.html
var templatesFS embed.FS

var pages = template.Must(template.ParseFS(templatesFS, "templates/*.html"))

// Info is what the page tells operators about the scans.
type Info struct {
	Operator     string // who scans
	Contact      string // contact email
	Purpose      string // why
	Ports        string // which ports and protocols
	Rate         string // probe rate
	Frequency    string // how often
	Stored       string // what is stored
	Published    string // what is published
	ProjectURL   string
	ScannerAddrs []string // the scanner's addresses, shown on the page
}

// DefaultInfo describes doqscan's own scans.
var DefaultInfo = Info{
	Operator:  "a DNS-over-QUIC measurement study (doqscan)",
	Contact:   "scan-abuse@example.org",
	Purpose:   "We measure how many DNS resolvers support DNS over QUIC (RFC 9250) and how fast they answer compared with DNS over UDP, TCP, TLS and HTTPS.",
	Ports:     "UDP 784, 853 and 8853 (one QUIC Initial that only triggers Version Negotiation, no connection state), UDP 53 (one DNS query for an A record). Hosts that answer with QUIC are then contacted once a week with a DoQ handshake and one DNS query; verified DNS-over-QUIC resolvers are queried once an hour over UDP/53, TCP/53, TCP/853, TCP/443 and their DoQ port.",
	Rate:      "at most a few hundred probes per second towards any /16, one probe per address and port per week",
	Frequency: "a scan every week, measurements every hour",
	Stored:    "for each address that answers: the reply's classification, advertised QUIC versions, the server certificate chain, timing of the DNS exchanges, AS number and coarse location from GeoIP databases",
	Published: "aggregate statistics and figures; per-address data only for public resolvers, never for addresses that opt out",
}

// Server serves the opt-out page.
type Server struct {
	Store        *store.Store
	BlocklistDir string
	Limits       Limits
	Info         Info
	Log          *slog.Logger
	Now          func() time.Time
	// PostsPerMinute and Burst bound form submissions per source (an IPv4 address or an
	// IPv6 /64); GetsPerSecond bounds page loads per source.
	PostsPerMinute float64
	Burst          int
	GetsPerSecond  float64
	// SecureCookies marks the CSRF cookie Secure (when served over TLS only).
	SecureCookies bool

	key     []byte
	mu      sync.Mutex // guards limiters and serialises blocklist rewrites
	posts   map[netip.Prefix]*limiterEntry
	gets    map[netip.Prefix]*limiterEntry
	fileMu  sync.Mutex
	initMux sync.Once
	mux     *http.ServeMux
}

type limiterEntry struct {
	lim  *rate.Limiter
	seen time.Time
}

// maxSources bounds the limiter tables (a flood from many sources cannot grow memory).
const maxSources = 100_000

func (s *Server) init() {
	s.initMux.Do(func() {
		s.key = make([]byte, 32)
		rand.Read(s.key)
		s.posts = map[netip.Prefix]*limiterEntry{}
		s.gets = map[netip.Prefix]*limiterEntry{}
		if s.Now == nil {
			s.Now = time.Now
		}
		if s.PostsPerMinute == 0 {
			s.PostsPerMinute = 6
		}
		if s.Burst == 0 {
			s.Burst = 3
		}
		if s.GetsPerSecond == 0 {
			s.GetsPerSecond = 10
		}
		if s.Limits == (Limits{}) {
			s.Limits = DefaultLimits
		}
		if s.Log == nil {
			s.Log = slog.Default()
		}
		s.mux = http.NewServeMux()
		s.mux.HandleFunc("GET /{$}", s.index)
		s.mux.HandleFunc("POST /optout", s.submit)
		s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	})
}

// ServeHTTP implements http.Handler with security headers on every response.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.init()
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self' 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	src := sourceKey(r.RemoteAddr)
	if r.Method == http.MethodGet && !s.allow(s.gets, src, rate.Limit(s.GetsPerSecond), int(s.GetsPerSecond)*2) {
		http.Error(w, ErrRateLimited.Error(), http.StatusTooManyRequests)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func sourceKey(remote string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Prefix{}
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p
	}
	return netip.PrefixFrom(a, 32)
}

func (s *Server) allow(table map[netip.Prefix]*limiterEntry, src netip.Prefix, r rate.Limit, burst int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	e, ok := table[src]
	if !ok {
		if len(table) >= maxSources {
			for k, v := range table {
				if now.Sub(v.seen) > 10*time.Minute {
					delete(table, k)
				}
			}
			if len(table) >= maxSources {
				return false
			}
		}
		e = &limiterEntry{lim: rate.NewLimiter(r, burst)}
		table[src] = e
	}
	e.seen = now
	return e.lim.AllowN(now, 1)
}

// page is what the templates render.
type page struct {
	Info     Info
	Token    string
	Range    string
	Email    string
	Note     string
	Error    string
	Field    string
	Excluded int
	Prefix   string
	Limits   Limits
}

// csrf: the cookie carries a random nonce, the form an HMAC of it under a per-process
// key. A forged cross-site POST has neither the cookie (SameSite=Strict) nor the means to
// compute the HMAC.
const csrfCookie = "doqscan_csrf"

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

func (s *Server) excluded(ctx context.Context) int {
	var n int
	if err := s.Store.Pool.QueryRow(ctx, `SELECT count(DISTINCT prefix) FROM optout_requests WHERE status = 'accepted'`).Scan(&n); err != nil {
		s.Log.Warn("count opt-outs", "err", err)
	}
	return n
}

func (s *Server) render(w http.ResponseWriter, status int, name string, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, p); err != nil {
		s.Log.Error("render", "template", name, "err", err)
	}
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "index.html", page{Info: s.Info, Token: s.token(w, r), Excluded: s.excluded(r.Context()),
		Limits: s.Limits})
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	src := sourceKey(r.RemoteAddr)
	if !s.allow(s.posts, src, rate.Limit(s.PostsPerMinute/60), s.Burst) {
		s.fail(w, r, http.StatusTooManyRequests, "", ErrRateLimited.Error())
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodySize)
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
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		a := ap.Addr().Unmap()
		source = &a
	}
	row := store.OptOutRequest{Prefix: req.Prefix, Email: req.Email, Note: req.Note, SourceAddr: source,
		Status: "accepted", CreatedAt: s.Now().UTC()}
	if _, err := store.Insert(r.Context(), s.Store, store.TableOptOutRequests, []store.OptOutRequest{row}); err != nil {
		s.Log.Error("store opt-out", "prefix", req.Prefix, "err", err)
		s.fail(w, r, http.StatusServiceUnavailable, "", "your request could not be stored right now; please try again later or write to the contact address")
		return
	}
	if _, err := s.Rewrite(r.Context()); err != nil {
		s.Log.Error("rewrite blocklist", "err", err)
		s.fail(w, r, http.StatusServiceUnavailable, "", "your request was stored but the blocklist could not be updated; it will be applied at the latest before the next scan")
		return
	}
	s.Log.Info("opt-out accepted", "prefix", req.Prefix, "source", r.RemoteAddr)
	s.render(w, http.StatusOK, "done.html", page{Info: s.Info, Prefix: req.Prefix.String(), Email: req.Email,
		Excluded: s.excluded(r.Context())})
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

func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, field, msg string) {
	s.Log.Info("opt-out refused", "status", status, "field", field, "reason", msg, "source", r.RemoteAddr)
	s.render(w, status, "index.html", page{Info: s.Info, Token: s.token(w, r), Error: msg, Field: field,
		Range: trunc(r.PostFormValue("range"), 64), Email: trunc(r.PostFormValue("email"), MaxEmailLen),
		Note: trunc(r.PostFormValue("note"), MaxNoteLen), Excluded: s.excluded(r.Context()), Limits: s.Limits})
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
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
		srv.Shutdown(sctx) //nolint:errcheck
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
