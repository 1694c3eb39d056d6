// Package dnsmsg builds the DNS queries doqscan sends and validates the responses it
// gets back (miekg/dns), so every transport judges "a valid DNS response" the same way.
package dnsmsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// DefaultQueryName is the name every tool asks for unless told otherwise (--query-name):
// zprobe's UDP/53 probe, verify's DoQ query, measure's cache-warming and measured
// queries, dnsbench's query without a query file. It is the name of the original
// study's measurements (Kosek et al., PAM 2022: "an A record for test.com", RD set), so
// a round's response times compare with the study's, and one name's behaviour is seen
// across every stage.
const DefaultQueryName = "test.com"

// EDNSBufferSize is the UDP payload size advertised in the OPT record (RFC 6891 §6.2.5;
// 1232 per the DNS flag day 2020 recommendation).
const EDNSBufferSize = 1232

// dnsHeaderLen is the fixed DNS header size (RFC 1035 §4.1.1).
const dnsHeaderLen = 12

// ErrBadResponse marks a reply that is not a valid DNS response to the query.
var ErrBadResponse = errors.New("bad DNS response")

// Query describes a DNS question.
type Query struct {
	Name         string // e.g. "test.com"
	Type         uint16 // dns.TypeA when zero
	ID           uint16 // 0 for DoQ (RFC 9250 §4.2.1)
	TCPKeepalive bool   // add an edns-tcp-keepalive option (RFC 7828 §3.1)
	// RcodeOnly: the caller needs only whether the response is valid and its rcode, so
	// it is judged with Check on the raw bytes instead of a full Validate.
	RcodeOnly bool
}

// Build returns the wire form of q with RD set (the study's method).
func Build(q Query) ([]byte, error) {
	return AppendBuild(make([]byte, 0, 64), q)
}

// AppendBuild appends what Build returns to b (a load generator reuses b's memory).
func AppendBuild(b []byte, q Query) ([]byte, error) {
	if _, ok := dns.IsDomainName(q.Name); !ok || q.Name == "" {
		return nil, fmt.Errorf("bad query name %q", q.Name)
	}
	if out, ok := appendQuery(b, q); ok {
		return out, nil // the same bytes as miekg/dns packs (TestBuildWire)
	}
	m := Message(q)
	packed, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("pack query %s: %w", q.Name, err)
	}
	return append(b, packed...), nil
}

// Message returns q as a dns.Msg.
func Message(q Query) *dns.Msg {
	t := q.Type
	if t == 0 {
		t = dns.TypeA
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(q.Name), t)
	m.Id = q.ID
	m.RecursionDesired = true
	m.SetEdns0(EDNSBufferSize, false)
	if q.TCPKeepalive {
		o := m.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_TCP_KEEPALIVE{Code: dns.EDNS0TCPKEEPALIVE})
	}
	return m
}

// Response is a validated DNS response.
type Response struct {
	Msg     *dns.Msg
	Rcode   int
	Answers []string // A/AAAA addresses in the answer section, in order
	// KeepaliveTimeout is the edns-tcp-keepalive timeout in 100 ms units, -1 if absent.
	KeepaliveTimeout int
}

// Validate parses raw and checks it answers q: QR set, same ID, same question.
func Validate(q Query, raw []byte) (*Response, error) {
	m := new(dns.Msg)
	if err := m.Unpack(raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	// miekg/dns stops quietly when a message ends on a record boundary; a message whose
	// sections hold fewer records than its header counts was cut short (RFC 1035 §4.1.1).
	if len(raw) >= dnsHeaderLen {
		an, ns, ar := int(binary.BigEndian.Uint16(raw[6:8])), int(binary.BigEndian.Uint16(raw[8:10])), int(binary.BigEndian.Uint16(raw[10:12]))
		extra := len(m.Extra) // miekg/dns keeps the OPT record in Extra
		if len(m.Answer) != an || len(m.Ns) != ns || extra != ar {
			return nil, fmt.Errorf("%w: truncated message: header counts %d/%d/%d records, message holds %d/%d/%d",
				ErrBadResponse, an, ns, ar, len(m.Answer), len(m.Ns), extra)
		}
	}
	if !m.Response {
		return nil, fmt.Errorf("%w: QR bit not set", ErrBadResponse)
	}
	if m.Id != q.ID {
		return nil, fmt.Errorf("%w: id %d, want %d", ErrBadResponse, m.Id, q.ID)
	}
	t := q.Type
	if t == 0 {
		t = dns.TypeA
	}
	// A server may omit the question in an error response (RFC 1035 leaves it open);
	// when present it must be ours.
	if len(m.Question) > 0 {
		qq := m.Question[0]
		if !strings.EqualFold(qq.Name, dns.Fqdn(q.Name)) || qq.Qtype != t {
			return nil, fmt.Errorf("%w: question %s/%d, want %s/%d", ErrBadResponse, qq.Name, qq.Qtype, dns.Fqdn(q.Name), t)
		}
	} else if m.Rcode == dns.RcodeSuccess {
		return nil, fmt.Errorf("%w: NOERROR without a question", ErrBadResponse)
	}
	r := &Response{Msg: m, Rcode: m.Rcode, KeepaliveTimeout: -1}
	for _, rr := range m.Answer {
		switch a := rr.(type) {
		case *dns.A:
			r.Answers = append(r.Answers, a.A.String())
		case *dns.AAAA:
			r.Answers = append(r.Answers, a.AAAA.String())
		}
	}
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if k, ok := opt.(*dns.EDNS0_TCP_KEEPALIVE); ok {
				r.KeepaliveTimeout = int(k.Timeout)
			}
		}
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
