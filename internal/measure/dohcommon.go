package measure

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/kstamp"
)

// DoH (RFC 8484) request details shared by DoH over HTTP/2 and HTTP/3.
const (
	dohMediaType   = "application/dns-message" // RFC 8484 §6
	dohDefaultPath = "/dns-query"              // RFC 8484 §4.1.1 example template
	dohMaxBody     = 65535                     // a DNS message's maximum size
	// dohMaxHeaderBytes bounds a response's header block (HTTP/2 and HTTP/3; the
	// libraries' default is 10 MB): a DoH response needs a few hundred bytes.
	dohMaxHeaderBytes = 16 << 10
	// dohReceiveBuffer is HTTP/2's receive window per stream and per connection (the
	// library's default: 4 MB and 1 GB): what a server can push ahead of our reads.
	dohReceiveBuffer = 128 << 10
)

// dohRequest builds the HTTP request for q (RFC 8484 §4.1: GET with dns=base64url, or
// POST with the message as body). The DNS ID is 0 for HTTP cache friendliness (§4.1).
func dohRequest(ctx context.Context, req *Request, q dnsmsg.Query) (*http.Request, error) {
	msg, err := dnsmsg.Build(q)
	if err != nil {
		return nil, err
	}
	host := req.ServerName
	if host == "" {
		host = req.Addr.String()
	}
	path := req.Path
	if path == "" {
		path = dohDefaultPath
	}
	u := url.URL{Scheme: "https", Host: host, Path: path}
	var hr *http.Request
	if strings.EqualFold(req.Variant, VariantPOST) {
		hr, err = http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(msg))
		if err == nil {
			hr.Header.Set("Content-Type", dohMediaType)
		}
	} else {
		u.RawQuery = "dns=" + base64.RawURLEncoding.EncodeToString(msg)
		hr, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	}
	if err != nil {
		return nil, fmt.Errorf("build DoH request: %w", err)
	}
	hr.Header.Set("Accept", dohMediaType)
	return hr, nil
}

// dohResponse reads and checks an HTTP response to a DoH query. end, when not nil,
// cancels the request's context and is called once the body was read to its end,
// before Body.Close: x/net's HTTP/2 Close then returns at once (the stream is closed
// on both sides, so no RST_STREAM is sent) instead of waiting for the transport's
// per-request goroutine to finish, which kept the query's slot busy.
func dohResponse(resp *http.Response, end context.CancelFunc) ([]byte, error) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w %d", errHTTPStatus, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, dohMaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("read DoH body: %w", err)
	}
	if len(body) > dohMaxBody {
		return nil, fmt.Errorf("%w: DoH body longer than %d bytes", errBadLength, dohMaxBody)
	}
	if end != nil {
		end()
	}
	return body, nil
}

// dohQueries runs req's queries as DoH requests over rt (an HTTP/2 or HTTP/3 client
// connection, concurrent requests with Streams > 1), timed on clk (the Log of the
// socket under it), appending them to res. With h2 (rt is x/net's HTTP/2 ClientConn)
// each request has a context of its own, canceled once its answer is read (see
// dohResponse).
func dohQueries(ctx context.Context, req *Request, res *Result, rt http.RoundTripper, clk *kstamp.Log, h2 bool) {
	runQueries(ctx, req, res, func(ctx context.Context, seq int, name string, qtype uint16, shared bool) Query {
		q := dnsmsg.Query{Name: name, Type: qtype, ID: 0, RcodeOnly: req.RcodeOnly}
		out := Query{Seq: seq, KeepaliveTimeout: -1}
		var end context.CancelFunc
		if h2 {
			ctx, end = context.WithCancel(ctx)
			defer end()
		}
		hr, err := dohRequest(ctx, req, q)
		if err != nil {
			out.Status, out.Err = StatusError, err
			return out
		}
		before := time.Now()
		if !shared {
			clk.Arm()
		}
		resp, err := rt.RoundTrip(hr)
		var raw []byte
		if err == nil {
			raw, err = dohResponse(resp, end)
		}
		out.StartedAt = before
		if !shared {
			out.StartedAt = clk.SentAt(before)
		}
		done := clk.ArrivedBy(out.StartedAt, time.Now())
		if err != nil {
			out.Status, out.Err = Classify(err), err
			return out
		}
		return finishQuery(out, q, raw, done)
	})
}
