package simquic

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// DoH3: hosts with doh3=443 answer RFC 8484 GET and POST over HTTP/3 with the population's
// rcode and answer; h3-only QUIC hosts answer 404.
func TestDoH3(t *testing.T) {
	f := setup(t)
	tr := &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			// addr is "198.19.c.d:port": reach it on loopback.
			ap, err := parseAddrPort(addr)
			if err != nil {
				return nil, err
			}
			return quic.DialAddr(ctx, f.target(ap.Addr(), ap.Port()).String(), tc, qc)
		},
	}
	defer tr.Close()
	client := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	q := new(dns.Msg)
	q.SetQuestion("test.com.", dns.TypeA)
	q.Id = 0
	wire, _ := q.Pack()
	n := 0
	for i := range f.pop.Records {
		r := &f.pop.Records[i]
		if r.DoH3 == 0 || r.Peer != "" || r.Class == "bulk-doq" && n > 3 {
			continue
		}
		n++
		base := "https://" + r.Prefix.Addr().String() + ":" + strconv.Itoa(int(r.DoH3)) + "/dns-query"
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			var req *http.Request
			if method == http.MethodGet {
				req, _ = http.NewRequest(method, base+"?dns="+base64.RawURLEncoding.EncodeToString(wire), nil)
			} else {
				req, _ = http.NewRequest(method, base, bytesReader(wire))
				req.Header.Set("Content-Type", dohMediaType)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("%s %s: %v", r.Class, method, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			m := new(dns.Msg)
			if resp.StatusCode != http.StatusOK || m.Unpack(body) != nil {
				t.Errorf("%s %s: status %d, body %x", r.Class, method, resp.StatusCode, body)
				continue
			}
			if dns.RcodeToString[m.Rcode] != r.RCode || (r.RCode == "NOERROR" && m.Answer[0].(*dns.A).A.String() != f.pop.Answer.String()) {
				t.Errorf("%s %s: %v", r.Class, method, m)
			}
		}
	}
	if n < 3 {
		t.Fatalf("only %d DoH3 hosts tried", n)
	}
	h := f.first(t, "quic-h3")
	resp, err := client.Get("https://" + h.Prefix.Addr().String() + ":" + strconv.Itoa(int(h.QUICPorts[0])) + "/dns-query?dns=AAAB")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("h3-only host: status %d, want 404", resp.StatusCode)
	}
}

func parseAddrPort(s string) (netip.AddrPort, error) { return netip.ParseAddrPort(s) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
