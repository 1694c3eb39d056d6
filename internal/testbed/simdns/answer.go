package simdns

import (
	"math/rand/v2"
	"net"
	"time"

	"github.com/miekg/dns"
)

const (
	// ednsUDPSize is the EDNS(0) UDP payload size simdns advertises (RFC 6891 §6.2.5; the
	// 2020 DNS flag day value).
	ednsUDPSize = 1232
	// headerLen is the fixed DNS header length (RFC 1035 §4.1.1).
	headerLen = 12
	// qrBit is the QR flag in the third header octet (RFC 1035 §4.1.1).
	qrBit = 0x80
	// garbageLen is the length of a ClassGarbage reply.
	garbageLen = 48
)

// DDRName is the special-use name a client asks for its resolver's designated encrypted
// resolvers (RFC 9462 §4).
const DDRName = "_dns.resolver.arpa."

// respond builds the wire reply to query under b for transport p. ok is false when no
// reply is due: the query is not even a DNS header or is a response, or the class sends
// nothing itself (reset, stall, tls-stall; endless is acted out by the transport).
func respond(query []byte, b Behaviour, p Protocol, keepalive time.Duration) (wire []byte, ok bool) {
	switch b.Class {
	case ClassReset, ClassStall, ClassTLSStall:
		return nil, false // silent whatever arrives
	case ClassGarbage:
		return garbage(), true // whatever arrives
	}
	req := new(dns.Msg)
	if err := req.Unpack(query); err != nil {
		if len(query) < headerLen || query[2]&qrBit != 0 {
			return nil, false // not even a header, or a response: never answer those
		}
		// A header but no valid message: FORMERR with the query's ID (RFC 1035 §4.1.1), as
		// BIND and Unbound do; a UDP RTT probe with a random payload gets an answer.
		m := new(dns.Msg)
		m.Id = uint16(query[0])<<8 | uint16(query[1])
		m.Response = true
		m.Rcode = dns.RcodeFormatError
		out, err := m.Pack()
		return out, err == nil
	}
	resp := reply(req, b, p, keepalive)
	out, err := resp.Pack()
	if err != nil {
		return nil, false
	}
	switch b.Class {
	case ClassTruncated:
		out = out[:len(out)/2]
	case ClassWrongLength:
		if p == DoUDP {
			out = out[:len(out)/2]
		}
	}
	return out, true
}

// reply is the correct response to req (before any hostile change but the ID).
func reply(req *dns.Msg, b Behaviour, p Protocol, keepalive time.Duration) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	m.Compress = true
	switch {
	case req.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
	case b.Class == ClassRefused:
		m.Rcode = dns.RcodeRefused
	case b.Class == ClassServfail:
		m.Rcode = dns.RcodeServerFailure
	case len(req.Question) != 1:
		m.Rcode = dns.RcodeFormatError
	default:
		q := req.Question[0]
		if q.Qclass == dns.ClassINET && q.Qtype == dns.TypeSVCB && dns.CanonicalName(q.Name) == DDRName {
			for _, rr := range b.DDR {
				c := dns.Copy(rr)
				c.Header().Name = q.Name
				m.Answer = append(m.Answer, c)
			}
		}
		if q.Qclass == dns.ClassINET && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY) {
			ans := b.Answer
			if !ans.IsValid() {
				ans = DefaultAnswer
			}
			ttl := b.TTL
			if ttl == 0 {
				ttl = DefaultTTL
			}
			a4 := ans.As4()
			m.Answer = []dns.RR{&dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
				A:   net.IP(a4[:]),
			}}
		}
	}
	if opt := req.IsEdns0(); opt != nil {
		ro := new(dns.OPT)
		ro.Hdr.Name = "."
		ro.Hdr.Rrtype = dns.TypeOPT
		ro.SetUDPSize(ednsUDPSize)
		// RFC 7828 §3.3.2: a server MAY answer a TCP query carrying edns-tcp-keepalive
		// with the option and its idle timeout, and MUST NOT send it otherwise (nor over
		// UDP; RFC 8484 §5.2 rules it out for DoH).
		if b.Keepalive && (p == DoTCP || p == DoT) && hasKeepalive(opt) {
			t := keepalive / (100 * time.Millisecond) // RFC 7828 §3.1: units of 100 ms
			if t > 0xffff {
				t = 0xffff
			}
			ro.Option = append(ro.Option, &dns.EDNS0_TCP_KEEPALIVE{Code: dns.EDNS0TCPKEEPALIVE, Timeout: uint16(t)})
		}
		m.Extra = append(m.Extra, ro)
	}
	if b.Class == ClassWrongID {
		m.Id = req.Id + 1 + uint16(rand.IntN(0xfffe))
	}
	return m
}

func hasKeepalive(opt *dns.OPT) bool {
	for _, o := range opt.Option {
		if o.Option() == dns.EDNS0TCPKEEPALIVE {
			return true
		}
	}
	return false
}

// garbage returns random bytes that do not parse as a DNS message.
func garbage() []byte {
	b := make([]byte, garbageLen)
	for {
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		if err := new(dns.Msg).Unpack(b); err != nil {
			return b
		}
	}
}

// wrongIDBurst is how many replies ClassEndless sends on UDP.
const wrongIDBurst = 16
