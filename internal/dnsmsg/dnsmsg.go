// Package dnsmsg builds the one DNS query doqscan sends to a resolver and checks the
// reply against it. It is deliberately small: the verifier and the measurement client
// both need "an A query with RD set" and "is this a valid answer to it".
package dnsmsg

import (
	"errors"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// Errors a reply can fail with (wrapped with details).
var (
	ErrUnparsable = errors.New("reply is not a DNS message")
	ErrNotReply   = errors.New("QR bit not set")
	ErrIDMismatch = errors.New("message ID differs from the query's")
	ErrQuestion   = errors.New("question section does not echo the query")
	ErrOpcode     = errors.New("opcode differs from the query's")
)

// Query is a built DNS query: the packed wire bytes and the message they came from.
type Query struct {
	Msg  *dns.Msg
	Wire []byte
}

// NewQuery builds a recursive (RD set, RFC 1035 §4.1.1) query for name/qtype with the
// given message ID. DoQ sends ID 0 (RFC 9250 §4.2.1); UDP and TCP a random ID.
func NewQuery(name string, qtype uint16, id uint16) (Query, error) {
	if _, ok := dns.IsDomainName(name); !ok || name == "" {
		return Query{}, fmt.Errorf("bad query name %q", name)
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.Id = id
	m.RecursionDesired = true
	wire, err := m.Pack()
	if err != nil {
		return Query{}, fmt.Errorf("pack query for %s: %w", name, err)
	}
	return Query{Msg: m, Wire: wire}, nil
}

// Check parses a reply and validates it against the query: parseable, QR set, same ID
// and opcode, the question echoed (name compared case-insensitively, RFC 4343). It
// returns the parsed reply; the rcode is the caller's to judge.
func Check(q Query, reply []byte) (*dns.Msg, error) {
	r := new(dns.Msg)
	if err := r.Unpack(reply); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnparsable, err)
	}
	if !r.Response {
		return r, ErrNotReply
	}
	if r.Id != q.Msg.Id {
		return r, fmt.Errorf("%w: %d, want %d", ErrIDMismatch, r.Id, q.Msg.Id)
	}
	if r.Opcode != q.Msg.Opcode {
		return r, fmt.Errorf("%w: %d", ErrOpcode, r.Opcode)
	}
	if len(r.Question) != 1 {
		return r, fmt.Errorf("%w: %d questions", ErrQuestion, len(r.Question))
	}
	got, want := r.Question[0], q.Msg.Question[0]
	if !strings.EqualFold(got.Name, want.Name) || got.Qtype != want.Qtype || got.Qclass != want.Qclass {
		return r, fmt.Errorf("%w: %s", ErrQuestion, got.String())
	}
	return r, nil
}

// RcodeName returns the mnemonic of an rcode ("NOERROR", "REFUSED", ...).
func RcodeName(rcode int) string {
	if s, ok := dns.RcodeToString[rcode]; ok {
		return s
	}
	return fmt.Sprintf("RCODE%d", rcode)
}
