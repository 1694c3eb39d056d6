package dnsmsg

import (
	"errors"
	"testing"

	"github.com/miekg/dns"
)

func reply(t *testing.T, q Query, mut func(*dns.Msg)) []byte {
	t.Helper()
	r := new(dns.Msg)
	r.SetReply(q.Msg)
	mut(r)
	b, err := r.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestQueryAndCheck(t *testing.T) {
	q, err := NewQuery("Example.Test", dns.TypeA, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Msg.RecursionDesired || q.Msg.Id != 0 || q.Msg.Question[0].Name != "Example.Test." {
		t.Fatalf("query %v", q.Msg)
	}
	cases := []struct {
		name string
		mut  func(*dns.Msg)
		want error
	}{
		{"ok", func(r *dns.Msg) {}, nil},
		{"case-folded echo", func(r *dns.Msg) { r.Question[0].Name = "example.TEST." }, nil},
		{"not a reply", func(r *dns.Msg) { r.Response = false }, ErrNotReply},
		{"id", func(r *dns.Msg) { r.Id = 7 }, ErrIDMismatch},
		{"question", func(r *dns.Msg) { r.Question[0].Name = "other.test." }, ErrQuestion},
		{"qtype", func(r *dns.Msg) { r.Question[0].Qtype = dns.TypeAAAA }, ErrQuestion},
		{"no question", func(r *dns.Msg) { r.Question = nil }, ErrQuestion},
		{"opcode", func(r *dns.Msg) { r.Opcode = dns.OpcodeNotify }, ErrOpcode},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Check(q, reply(t, q, c.mut))
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	if _, err := Check(q, []byte{1, 2, 3}); !errors.Is(err, ErrUnparsable) {
		t.Fatalf("garbage: %v", err)
	}
	if _, err := NewQuery("bad..name", dns.TypeA, 0); err == nil {
		t.Fatal("bad name accepted")
	}
	if RcodeName(dns.RcodeRefused) != "REFUSED" || RcodeName(99) != "RCODE99" {
		t.Fatal("rcode names")
	}
}

func FuzzCheck(f *testing.F) {
	q, _ := NewQuery("example.test", dns.TypeA, 0)
	r := new(dns.Msg)
	r.SetReply(q.Msg)
	b, _ := r.Pack()
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Check(q, b)
		if err == nil && (m == nil || !m.Response || m.Id != 0) {
			t.Fatalf("accepted %x", b)
		}
	})
}
