package dnsmsg

import (
	"bytes"
	"errors"
	"net"
	"testing"

	"github.com/miekg/dns"
)

// TestBuildWire: Build's own encoder gives the bytes miekg/dns packs, and names it
// cannot encode go to miekg/dns.
func TestBuildWire(t *testing.T) {
	for _, q := range []Query{
		{Name: "test.com", ID: 4711},
		{Name: "test.com.", Type: dns.TypeAAAA, ID: 1},
		{Name: "A.Example", Type: dns.TypeTXT, ID: 0xFFFF, TCPKeepalive: true},
		{Name: ".", Type: dns.TypeNS},
		{Name: "x.y.z.w.v.u.example.org", Type: dns.TypeHTTPS, ID: 256},
	} {
		m := Message(q)
		want, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendQuery(nil, q)
		if !ok {
			t.Fatalf("%+v: not encoded", q)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%+v:\n got %x\nwant %x", q, got, want)
		}
		b, err := Build(q)
		if err != nil || !bytes.Equal(b, want) {
			t.Errorf("Build(%+v) = %x, %v", q, b, err)
		}
	}
	for _, name := range []string{`a\.b.example`, "a..b", string(bytes.Repeat([]byte("a"), 64)) + ".example"} {
		if _, ok := appendQuery(nil, Query{Name: name}); ok {
			t.Errorf("%q encoded without miekg/dns", name)
		}
	}
	// An escaped name still builds, through miekg/dns.
	if _, err := Build(Query{Name: `a\.b.example`}); err != nil {
		t.Errorf("escaped name: %v", err)
	}
}

func reply(t testing.TB, q Query, edit func(*dns.Msg)) []byte {
	req := Message(q)
	m := new(dns.Msg)
	m.SetReply(req)
	m.Compress = true
	m.SetEdns0(1232, false)
	m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: dns.Fqdn(q.Name), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)})
	if edit != nil {
		edit(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheck: Check accepts and rejects what Validate does, on the raw bytes.
func TestCheck(t *testing.T) {
	q := Query{Name: "test.com", ID: 4711}
	good := reply(t, q, nil)
	for _, c := range []struct {
		name  string
		raw   []byte
		rcode int // -1: bad response
	}{
		{"answer", good, 0},
		{"upper case question", reply(t, Query{Name: "TEST.com", ID: 4711}, nil), 0},
		{"nxdomain", reply(t, q, func(m *dns.Msg) { m.Rcode = dns.RcodeNameError; m.Answer = nil }), dns.RcodeNameError},
		{"extended rcode", reply(t, q, func(m *dns.Msg) { m.Rcode = dns.RcodeBadVers }), dns.RcodeBadVers},
		{"refused, header only", func() []byte {
			b := reply(t, q, func(m *dns.Msg) { m.Rcode = dns.RcodeRefused; m.Answer, m.Extra = nil, nil })
			return b[:12]
		}(), dns.RcodeRefused},
		{"noerror, header only", func() []byte {
			b := reply(t, q, func(m *dns.Msg) { m.Answer, m.Extra = nil, nil })
			return b[:12]
		}(), -1},
		{"noerror, no question", reply(t, q, func(m *dns.Msg) { m.Question = nil }), -1},
		{"servfail, no question", reply(t, q, func(m *dns.Msg) { m.Question = nil; m.Rcode = dns.RcodeServerFailure }), dns.RcodeServerFailure},
		{"wrong id", reply(t, q, func(m *dns.Msg) { m.Id++ }), -1},
		{"not a response", reply(t, q, func(m *dns.Msg) { m.Response = false }), -1},
		{"wrong name", reply(t, q, func(m *dns.Msg) { m.Question[0].Name = "test.org." }), -1},
		{"longer name", reply(t, q, func(m *dns.Msg) { m.Question[0].Name = "a.test.com." }), -1},
		{"wrong type", reply(t, q, func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA }), -1},
		{"cut in a record", good[:len(good)-5], -1},
		{"cut after the question", good[:12+len("\x04test\x03com\x00")+4], -1},
		{"garbage", []byte{1, 2, 3}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc, err := Check(q, c.raw)
			vr, verr := Validate(q, c.raw)
			if c.rcode < 0 {
				if !errors.Is(err, ErrBadResponse) {
					t.Fatalf("Check = %d, %v; want a bad response", rc, err)
				}
				if verr == nil {
					t.Fatalf("Validate accepts it (%+v): the case is wrong", vr)
				}
				return
			}
			if err != nil || rc != c.rcode {
				t.Fatalf("Check = %d, %v; want %d", rc, err, c.rcode)
			}
			if verr != nil || vr.Rcode != rc {
				t.Fatalf("Validate = %+v, %v: disagrees", vr, verr)
			}
		})
	}
	// A question name that needs escapes goes through Validate.
	eq := Query{Name: `a\.b.example`, ID: 9}
	if rc, err := Check(eq, reply(t, eq, func(m *dns.Msg) { m.Answer = nil })); err != nil || rc != 0 {
		t.Fatalf("escaped name: %d, %v", rc, err)
	}
}

// FuzzCheck: never a panic; whatever Validate accepts, Check accepts with the same
// rcode; whatever Check accepts has QR set and the query's ID.
func FuzzCheck(f *testing.F) {
	q := Query{Name: "test.com", ID: 4711}
	f.Add(reply(f, q, nil))
	f.Add(reply(f, q, func(m *dns.Msg) { m.Rcode = dns.RcodeBadVers }))
	f.Add(reply(f, q, func(m *dns.Msg) { m.Question = nil; m.Rcode = dns.RcodeRefused }))
	f.Add([]byte{0x12, 0x67, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 12, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		rc, err := Check(q, b)
		if err != nil && !errors.Is(err, ErrBadResponse) {
			t.Fatalf("error not classified: %v", err)
		}
		if err == nil && (len(b) < 12 || b[2]&0x80 == 0 || b[0] != 0x12 || b[1] != 0x67) {
			t.Fatalf("accepted %x", b)
		}
		if r, verr := Validate(q, b); verr == nil && (err != nil || rc != r.Rcode) {
			t.Fatalf("Validate accepts (rcode %d), Check = %d, %v", r.Rcode, rc, err)
		}
	})
}
