package simdns

import (
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/population"
)

const (
	// dohPath is the URI template's path (RFC 8484 §3 leaves it to the server; "/dns-query"
	// is the convention every public resolver and client default uses).
	dohPath = "/dns-query"
	// dohParam is the GET variable carrying the query (RFC 8484 §4.1).
	dohParam = "dns"
	// dohMediaType is the DNS wire-format media type (RFC 8484 §6).
	dohMediaType = "application/dns-message"
	// dohMaxStreams bounds concurrent HTTP/2 streams per connection (announced as
	// SETTINGS_MAX_CONCURRENT_STREAMS: the connection check's ground truth).
	dohMaxStreams = population.SimDoHStreams
	// dohMaxHeader bounds request headers.
	dohMaxHeader = 16 << 10
)

// connListener hands connections the front has already accepted, checked and
// TLS-handshaken to http.Server.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// notifyConn reports its Close, so the front keeps counting the connection (and its
// goroutine budget) until http.Server is done with it.
type notifyConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

func (s *Server) startDoH() {
	l := &connListener{ch: make(chan net.Conn), done: make(chan struct{}),
		addr: &net.TCPAddr{IP: s.cfg.Listen.AsSlice()}}
	srv := &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: s.cfg.Limits.IdleTimeout,
		IdleTimeout:       s.cfg.Limits.IdleTimeout,
		MaxHeaderBytes:    dohMaxHeader,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: dohMaxStreams},
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.doh = l
	s.wg.Go(func() { srv.Serve(l) })
	s.wg.Go(func() {
		<-s.ctx.Done()
		l.Close()
		srv.Close()
	})
}

// serveDoH completes the TLS handshake and hands the connection to the HTTP server
// (HTTP/2 or HTTP/1.1 by ALPN), returning when the server has closed it.
func (s *Server) serveDoH(c net.Conn, local netip.Addr, b Behaviour) {
	nc := &notifyConn{Conn: c, closed: make(chan struct{})}
	tc, err := s.handshake(nc, local, DoH, b)
	if err != nil {
		s.log.Debug("simdns: doh handshake", "addr", local, "err", err)
		c.Close()
		return
	}
	select {
	case s.doh.ch <- tc:
	case <-s.ctx.Done():
		c.Close()
		return
	}
	select {
	case <-nc.closed:
	case <-s.ctx.Done():
	}
}

// serveHTTP answers one DoH request (RFC 8484 §4.1: GET with ?dns=base64url, POST with an
// application/dns-message body).
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if la == nil {
		http.Error(w, "no local address", http.StatusInternalServerError)
		return
	}
	local := s.cfg.MapAddr(addrOf(la))
	b, ok := s.cfg.Directory.Behaviour(local, DoH)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	if r.URL.Path != dohPath {
		http.NotFound(w, r)
		return
	}
	var query []byte
	switch r.Method {
	case http.MethodGet:
		v := r.URL.Query().Get(dohParam)
		// RFC 8484 §6: base64url without padding; accept padded input too.
		q, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "="))
		if err != nil || v == "" {
			http.Error(w, "bad dns parameter", http.StatusBadRequest)
			return
		}
		query = q
	case http.MethodPost:
		if ct := r.Header.Get("Content-Type"); ct != dohMediaType {
			http.Error(w, "want "+dohMediaType, http.StatusUnsupportedMediaType)
			return
		}
		q, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.cfg.Limits.MaxQueryTCP)))
		if err != nil {
			http.Error(w, "query too large", http.StatusRequestEntityTooLarge)
			return
		}
		query = q
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch b.Class {
	case ClassStall:
		t := time.NewTimer(s.cfg.Limits.HoldTimeout)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		panic(http.ErrAbortHandler) // close (HTTP/1.1) or reset the stream (HTTP/2), never answer
	case ClassEndless:
		s.endlessBody(w, r)
		panic(http.ErrAbortHandler)
	}
	wire, ok := respond(query, b, DoH, 0)
	if !ok {
		http.Error(w, "not a DNS query", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", dohMediaType)
	ttl := b.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	w.Header().Set("Cache-Control", "max-age="+strconv.Itoa(int(ttl))) // RFC 8484 §5.1
	n := len(wire)
	if b.Class == ClassWrongLength {
		n += wrongLengthExcess
	}
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusOK)
	w.Write(wire)
}

// endlessBody streams a 200 application/dns-message body that never ends (one byte per
// TrickleEvery) until the client goes away or HoldTimeout passes.
func (s *Server) endlessBody(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", dohMediaType)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	end := time.NewTimer(s.cfg.Limits.HoldTimeout)
	defer end.Stop()
	t := time.NewTicker(s.cfg.Limits.TrickleEvery)
	defer t.Stop()
	b := garbage()
	for i := 0; ; i++ {
		select {
		case <-t.C:
		case <-end.C:
			return
		case <-r.Context().Done():
			return
		}
		if _, err := w.Write(b[i%len(b) : i%len(b)+1]); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}
