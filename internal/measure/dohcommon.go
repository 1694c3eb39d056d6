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
	DoHMediaType   = "application/dns-message" // RFC 8484 §6
	dohDefaultPath = "/dns-query"              // RFC 8484 §4.1.1 example template
	DoHMaxBody     = 65535                     // a DNS message's maximum size
	// DoHMaxHeaderBytes bounds a response's header block (HTTP/2 and HTTP/3; the
	// libraries' default is 10 MB): a DoH response needs a few hundred bytes.
	DoHMaxHeaderBytes = 16 << 10
	// DoHReceiveBuffer is HTTP/2's receive window per stream and per connection (the
	// library's default: 4 MB and 1 GB): what a server can push ahead of our reads.
	DoHReceiveBuffer = 128 << 10
)

// DoHTarget is the authority and path of req's DoH requests (RFC 8484 §4.1: the URI
// template's host, or the address; its path, or /dns-query).
func DoHTarget(req *Request) (authority, path string) {
	authority, path = req.ServerName, req.Path
	if authority == "" {
		authority = req.Addr.String()
	}
	if path == "" {
		path = dohDefaultPath
	}
	return authority, path
}

// IsPOST reports whether DoH requests are POSTs (Variant "post"); GET otherwise.
func (r *Request) IsPOST() bool { return strings.EqualFold(r.Variant, VariantPOST) }

// dohRequest builds the HTTP request carrying msg (RFC 8484 §4.1: GET with
// dns=base64url, or POST with the message as body).
func dohRequest(ctx context.Context, req *Request, msg []byte) (*http.Request, error) {
	host, path := DoHTarget(req)
	u := url.URL{Scheme: "https", Host: host, Path: path}
	var hr *http.Request
	var err error
	if req.IsPOST() {
		hr, err = http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(msg))
		if err == nil {
			hr.Header.Set("Content-Type", DoHMediaType)
		}
	} else {
		u.RawQuery = "dns=" + base64.RawURLEncoding.EncodeToString(msg)
		hr, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	}
	if err != nil {
		return nil, fmt.Errorf("build DoH request: %w", err)
	}
	hr.Header.Set("Accept", DoHMediaType)
	return hr, nil
}

// dohResponse reads and checks an HTTP response to a DoH query. read, when not nil, is
// called once the body was read to its end, before it is closed.
func dohResponse(resp *http.Response, read func()) ([]byte, error) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w %d", errHTTPStatus, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, DoHMaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("read DoH body: %w", err)
	}
	if len(body) > DoHMaxBody {
		return nil, fmt.Errorf("%w: DoH body longer than %d bytes", errBadLength, DoHMaxBody)
	}
	if read != nil {
		read()
	}
	return body, nil
}

// dohExchange sends one DoH query (its DNS message) and returns the response body and
// when the client had it (zero: when it returned); sending is called just before the
// query's first write.
type dohExchange func(ctx context.Context, msg []byte, sending func()) (body []byte, at time.Time, err error)

// dohSession is the session of DoH requests sent through ex (concurrent requests when
// queries are outstanding together), timed on clk (the Log of the socket under it). The
// DNS ID is 0 for HTTP cache friendliness (RFC 8484 §4.1).
func dohSession(req *Request, ex dohExchange, clk *kstamp.Log) *Session {
	return &Session{req: req, ex: func(ctx context.Context, seq int, q dnsmsg.Query, shared bool) Query {
		q = dnsmsg.Query{Name: q.Name, Type: q.Type, ID: 0, RcodeOnly: q.RcodeOnly}
		out := Query{Seq: seq, KeepaliveTimeout: -1}
		msg, err := dnsmsg.Build(q)
		if err != nil {
			out.Status, out.Err = StatusError, err
			return out
		}
		var before time.Time
		raw, at, err := ex(ctx, msg, func() {
			before = time.Now()
			if !shared {
				clk.Arm()
			}
		})
		if before.IsZero() { // it failed before anything was sent
			before = time.Now()
		}
		out.StartedAt = before
		if !shared {
			out.StartedAt = clk.SentAt(before)
		}
		if at.IsZero() {
			at = time.Now()
		}
		done := clk.ArrivedBy(out.StartedAt, at)
		if err != nil {
			out.Status, out.Err = Failure(ctx, StepAnswer, err)
			return out
		}
		return CheckAnswer(out, q, raw, done)
	}}
}
