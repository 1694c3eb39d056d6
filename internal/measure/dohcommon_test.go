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

// TestDoHResponseEnd: dohResponse calls end (which cancels the request's context)
// exactly when it read the whole body, and never for a failed response.
func TestDoHResponseEnd(t *testing.T) {
	for _, c := range []struct {
		name    string
		status  int
		body    io.Reader
		wantEnd bool
	}{
		{"answer", http.StatusOK, strings.NewReader("abc"), true},
		{"status", http.StatusBadRequest, strings.NewReader("abc"), false},
		{"too long", http.StatusOK, bytes.NewReader(make([]byte, dohMaxBody+1)), false},
		{"read error", http.StatusOK, io.MultiReader(strings.NewReader("ab"), errReader{}), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ends := 0
			body, err := dohResponse(&http.Response{StatusCode: c.status, Body: io.NopCloser(c.body)}, func() { ends++ })
			if got := ends == 1; got != c.wantEnd || ends > 1 {
				t.Errorf("end called %d times, want it called: %v", ends, c.wantEnd)
			}
			if c.wantEnd && (err != nil || string(body) != "abc") {
				t.Errorf("body %q, err %v", body, err)
			}
			if !c.wantEnd && err == nil {
				t.Errorf("no error for a failed response")
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

// TestDoHConcurrentNoReset: concurrent DoH GET requests on one HTTP/2 connection (an
// h2c loopback server) all get their answers, and the client writes one HEADERS frame
// per request and no RST_STREAM: canceling a request's context once its answer was
// read must not reset its stream.
func TestDoHConcurrentNoReset(t *testing.T) {
	const queries, streams = 40, 8
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		w.Header().Set("Content-Type", dohMediaType)
		_, _ = w.Write(out)
	})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p}
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
	// The same x/net client connection as measureDoH (see .golangci.yml on doh.go).
	tr, err := http2.ConfigureTransports(&http.Transport{}) //nolint:staticcheck // as measureDoH
	if err != nil {
		t.Fatal(err)
	}
	cc, err := tr.NewClientConn(conn) //nolint:staticcheck // as measureDoH
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	req := &Request{Mode: ModePersistent, Queries: queries, Streams: streams, Timeout: 10 * time.Second, Name: "a.example",
		Addr: netip.MustParseAddrPort(ln.Addr().String())}
	res := &Result{}
	dohQueries(context.Background(), req, res, cc, &kstamp.Log{}, true)
	if len(res.Queries) != queries {
		t.Fatalf("%d outcomes, want %d: %+v", len(res.Queries), queries, res.Queries)
	}
	for _, q := range res.Queries {
		if q.Status != StatusOK {
			t.Fatalf("query %d: %s %v", q.Seq, q.Status, q.Err)
		}
	}
	// Shutdown returns once every stream is forgotten, which comes after any reset
	// the transport writes for it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
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
