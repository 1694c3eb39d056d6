// Package optouttest fills the opt-out form as a browser does, for tests: it fetches the
// page (which sets the CSRF cookie), reads the form's CSRF token and posts the form with
// both.
package optouttest

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// CSRFToken matches the form's CSRF field; its one group is the token.
var CSRFToken = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// Client is a browser-like client of the opt-out server at Base: it keeps the CSRF
// cookie in a cookie jar. Any transport error fails the test.
type Client struct {
	t    testing.TB
	Base string
	HTTP *http.Client
}

// NewClient returns a client of the server at base (for example httptest.Server.URL).
func NewClient(t testing.TB, base string) *Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Client{t: t, Base: base, HTTP: &http.Client{Jar: jar}}
}

// Token fetches the page and returns its form's CSRF token (the cookie goes in the jar).
func (c *Client) Token() string {
	c.t.Helper()
	code, b := c.read(c.HTTP.Get(c.Base + "/"))
	m := CSRFToken.FindStringSubmatch(b)
	if m == nil {
		c.t.Fatalf("no CSRF token on the opt-out page (HTTP %d): %.300s", code, b)
	}
	return m[1]
}

// Post posts form to /optout as it is and returns the HTTP status and the body.
func (c *Client) Post(form url.Values) (int, string) {
	c.t.Helper()
	return c.read(c.HTTP.PostForm(c.Base+"/optout", form))
}

// read returns the status and the whole body of a response; an error fails the test.
func (c *Client) read(resp *http.Response, err error) (int, string) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// Submit fills the form for prefix and email with a fresh token and posts it; it fails
// the test unless the answer is 200 and names prefix, and returns the answer page.
func (c *Client) Submit(prefix, email, note string) string {
	c.t.Helper()
	code, body := c.Post(url.Values{"csrf": {c.Token()}, "range": {prefix}, "email": {email}, "note": {note}})
	if code != http.StatusOK || !strings.Contains(body, prefix) {
		c.t.Fatalf("opt-out of %s: HTTP %d\n%s", prefix, code, body)
	}
	return body
}
