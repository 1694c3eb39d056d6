package simquic

import (
	"encoding/base64"
	"io"
	"net/http"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/doqscan/doqscan/internal/doq"
)

// HTTP/3 on QUIC hosts whose ALPN is h3: DNS over HTTPS (RFC 8484) on the host's doh3 port,
// 404 for everything else (the h3-only "QUIC but not DoQ" web servers).
const (
	alpnH3        = "h3"                      // RFC 9114 §3.1
	dohPath       = "/dns-query"              // RFC 8484 §3 leaves the path to the server; the common convention
	dohParam      = "dns"                     // RFC 8484 §4.1: GET variable
	dohMediaType  = "application/dns-message" // RFC 8484 §6
	dohMaxRequest = doq.MaxMessageSize
)

func (s *Server) serveH3(t *tport, conn *quic.Conn) {
	srv := &http3.Server{Handler: s.h3Handler(t.prof)}
	_ = srv.ServeQUICConn(conn)
}

func (s *Server) h3Handler(prof profile) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !prof.doh3 || r.URL.Path != dohPath {
			http.NotFound(w, r)
			return
		}
		var query []byte
		var err error
		switch r.Method {
		case http.MethodGet:
			query, err = base64.RawURLEncoding.DecodeString(r.URL.Query().Get(dohParam))
		case http.MethodPost:
			query, err = io.ReadAll(io.LimitReader(r.Body, dohMaxRequest))
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if err != nil || len(query) == 0 {
			http.Error(w, "bad DNS query", http.StatusBadRequest)
			return
		}
		s.Stats.Queries.Add(1)
		resp, err := answer(s.cfg.Population, query, prof.rcode)
		if err != nil {
			http.Error(w, "bad DNS query", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", dohMediaType)
		w.Write(resp)
	})
}
