package measure

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/http2"

	"github.com/doqscan/doqscan/internal/kstamp"
)

// TestDoHResponse: dohResponse returns the body of a 200 response and classifies the
// others (DoH3's responses).
func TestDoHResponse(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   io.Reader
		want   Status
	}{
		{"answer", http.StatusOK, strings.NewReader("abc"), StatusOK},
		{"status", http.StatusBadRequest, strings.NewReader("abc"), StatusHTTPError},
		{"too long", http.StatusOK, bytes.NewReader(make([]byte, DoHMaxBody+1)), StatusBadResponse},
		{"read error", http.StatusOK, io.MultiReader(strings.NewReader("ab"), errReader{}), StatusError},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, err := dohResponse(&http.Response{StatusCode: c.status, Body: io.NopCloser(c.body)}, nil)
			if got := Classify(err); got != c.want {
				t.Errorf("status %s (%v), want %s", got, err, c.want)
			}
			if c.want == StatusOK && string(body) != "abc" {
				t.Errorf("body %q", body)
			}
		})
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("broken") }

// teeConn records what the client writes.
type teeConn struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (c *teeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// TestDoHConcurrentNoReset: concurrent DoH GET requests on one HTTP/2 connection (the
// h2c server of net/http on loopback) all get their answers, and the client writes
// one HEADERS frame per request and no RST_STREAM: a stream that ended is not reset.
func TestDoHConcurrentNoReset(t *testing.T) {
	const queries, streams = 40, 8
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := base64.RawURLEncoding.DecodeString(r.URL.Query().Get("dns"))
		var q dns.Msg
		if err == nil {
			err = q.Unpack(raw)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a := new(dns.Msg).SetReply(&q)
		out, err := a.Pack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", DoHMediaType)
		_, _ = w.Write(out)
	})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: handler, Protocols: &p}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn := &teeConn{Conn: raw}
	h, err := newH2Conn(conn)
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Mode: ModePersistent, Queries: queries, Streams: streams, Timeout: 10 * time.Second, Name: "a.example",
		Addr: netip.MustParseAddrPort(ln.Addr().String())}
	res := &Result{}
	res.Queries = drive(context.Background(), dohSession(req, func(ctx context.Context, msg []byte, sending func()) ([]byte, time.Time, error) {
		return h.Exchange(ctx, req, msg, sending)
	}, &kstamp.Log{}))
	if len(res.Queries) != queries {
		t.Fatalf("%d outcomes, want %d: %+v", len(res.Queries), queries, res.Queries)
	}
	for _, q := range res.Queries {
		if q.Status != StatusOK {
			t.Fatalf("query %d: %s %v", q.Seq, q.Status, q.Err)
		}
	}
	// Every request was answered: the frames the client wrote for them are in conn.out.
	h.Close()
	conn.mu.Lock()
	written := bytes.Clone(conn.out.Bytes())
	conn.mu.Unlock()
	written, ok := bytes.CutPrefix(written, []byte(http2.ClientPreface))
	if !ok {
		t.Fatal("no client preface")
	}
	fr := http2.NewFramer(nil, bytes.NewReader(written))
	headers, resets := 0, 0
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch f.(type) {
		case *http2.HeadersFrame:
			headers++
		case *http2.RSTStreamFrame:
			resets++
		}
	}
	if headers != queries || resets != 0 {
		t.Errorf("client wrote %d HEADERS and %d RST_STREAM frames, want %d and 0", headers, resets, queries)
	}
}
