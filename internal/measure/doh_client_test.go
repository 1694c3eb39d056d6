package measure_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/measure"
)

// TestDoHRunsGoHTTP2Client: the hourly DoH measurement (For(DoH)) sends what Go's own
// HTTP/2 client sends, GET and POST (its User-Agent and Accept-Encoding), over
// HTTP/2, and times and classifies the answer as before: the campaign measures what a
// stock client sees, not a client of its own.
func TestDoHRunsGoHTTP2Client(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		var raw []byte
		var err error
		if r.Method == http.MethodPost {
			raw = make([]byte, 512)
			n, _ := r.Body.Read(raw)
			raw = raw[:n]
		} else {
			raw, err = base64.RawURLEncoding.DecodeString(r.URL.Query().Get("dns"))
		}
		q := new(dns.Msg)
		if err != nil || q.Unpack(raw) != nil {
			http.Error(w, "bad query", http.StatusBadRequest)
			return
		}
		out, _ := new(dns.Msg).SetReply(q).Pack()
		w.Header().Set("Content-Type", measure.DoHMediaType)
		_, _ = w.Write(out)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	m, _ := measure.For(measure.DoH)
	for _, v := range []string{measure.VariantGET, measure.VariantPOST} {
		res := m.Measure(context.Background(), &measure.Request{Addr: addr, Variant: v, Timeout: 5 * time.Second, Name: "a.example"})
		if res.Status != measure.StatusOK || res.ALPN != "h2" || !res.HasHandshake || len(res.Queries) != 1 || res.Queries[0].Resolve <= 0 {
			t.Fatalf("%s: %s (%v), ALPN %q, queries %+v", v, res.Status, res.Err, res.ALPN, res.Queries)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("%d requests, want 2", len(seen))
	}
	for _, r := range seen {
		if r.ProtoMajor != 2 || r.UserAgent() != "Go-http-client/2.0" || r.Header.Get("Accept-Encoding") != "gzip" ||
			r.Header.Get("Accept") != measure.DoHMediaType {
			t.Errorf("%s %s: %s, headers %v: not Go's HTTP/2 client", r.Method, r.URL.Path, r.Proto, r.Header)
		}
	}
}
