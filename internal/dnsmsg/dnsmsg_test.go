package dnsmsg

import (
	"errors"
	"net"
	"testing"

	"github.com/miekg/dns"
)

func TestBuildValidate(t *testing.T) {
	q := Query{Name: "test.com", ID: 4711}
	raw, err := Build(q)
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(raw); err != nil {
		t.Fatal(err)
	}
	if !m.RecursionDesired || m.Question[0].Qtype != dns.TypeA {
		t.Fatalf("query %v", m)
	}
	resp := new(dns.Msg)
	resp.SetReply(m)
	resp.SetEdns0(1232, false) // an OPT record in ARCOUNT must not look like truncation
	resp.Answer = append(resp.Answer, &dns.A{Hdr: dns.RR_Header{Name: "test.com.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)})
	b, _ := resp.Pack()
	r, err := Validate(q, b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != 0 || len(r.Answers) != 1 || r.Answers[0] != "192.0.2.1" {
		t.Fatalf("got %+v", r)
	}
	// Cut after the question: miekg/dns alone would accept it.
	full, _ := resp.Pack()
	cut := full[:12+len("\x04test\x03com\x00")+4]
	if _, err := Validate(q, cut); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("truncated: %v", err)
	}
	// Wrong id, not a response, garbage.
	resp.Id++
	b, _ = resp.Pack()
	if _, err := Validate(q, b); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("wrong id: %v", err)
	}
	if _, err := Validate(q, raw); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("query as response: %v", err)
	}
	if _, err := Validate(q, []byte{1, 2, 3}); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("garbage: %v", err)
	}
}

func FuzzValidate(f *testing.F) {
	raw, _ := Build(Query{Name: "test.com"})
	f.Add(raw)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Validate(Query{Name: "test.com"}, b)
	})
}
