// Package probe is the scan of cmd/zprobe: the probe payloads (a VN-forcing QUIC Initial
// and a DNS query), the classifier of every reply, the zmap driver, the built-in sender
// for hitlists, and the ingest of classified replies into the store.
package probe

import (
	"errors"
	"net/netip"
	"time"

	"github.com/doqscan/doqscan/internal/outcome"
	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/store"
)

// Kind is the classification of one reply; the values are scan_replies.reply_kind.
type Kind string

// Reply kinds (schema.sql, scan_replies.reply_kind).
const (
	KindQUICVN        Kind = "quic-vn"         // valid Version Negotiation echoing our CIDs
	KindQUICVNInvalid Kind = "quic-vn-invalid" // VN-shaped but malformed / wrong CIDs
	KindQUICOther     Kind = "quic-other"      // another QUIC long/short header packet
	KindNotQUIC       Kind = "not-quic"        // a UDP answer that is not QUIC
	KindDNS           Kind = "dns"             // a parseable DNS reply to our query
	KindDNSMalformed  Kind = "dns-malformed"   // an answer on a DNS port that is not one
	KindICMPUnreach   Kind = "icmp-unreach"    // ICMP destination unreachable
	KindUDPReply      Kind = "udp-reply"       // imported from the study's scan: any UDP answer, address only (internal/dataset)
)

// ReplyKinds is the table of reply kinds (scan_replies.reply_kind). The classifier gives
// every kind but udp-reply, which only imported datasets carry. 'icmp-unreach' is any
// ICMP destination unreachable (icmp_code says which); measure and rtt call a port
// unreachable conn-refused, verify unreachable.
var ReplyKinds = outcome.Table[Kind]{
	{Status: KindQUICVN, Meaning: "a Version Negotiation packet that echoes our CIDs and lists versions, not ours"},
	{Status: KindQUICVNInvalid, Meaning: "VN-shaped, but truncated, misaligned, without versions, with other CIDs, or listing our version"},
	{Status: KindQUICOther, Meaning: "another QUIC packet (long header with valid invariants, or a short header)"},
	{Status: KindNotQUIC, Meaning: "any other UDP answer on a QUIC port"},
	{Status: KindDNS, Meaning: "a DNS response with our ID and question, every record within bounds"},
	{Status: KindDNSMalformed, Meaning: "any other answer on a DNS port"},
	{Status: KindICMPUnreach, Meaning: "ICMP destination unreachable (type and code stored)"},
	{Status: KindUDPReply, Meaning: "imported from the original study's scan: it counted any UDP answer and kept only the address"},
}

// Kinds lists every kind the classifier gives, in report order.
var Kinds = []Kind{KindQUICVN, KindQUICVNInvalid, KindQUICOther, KindNotQUIC, KindDNS, KindDNSMalformed, KindICMPUnreach}

// ProbeKind says which probe a port's run sends (scan_runs.probe_kind).
type ProbeKind string

// Probe kinds.
const (
	ProbeQUIC ProbeKind = "quic-vn"
	ProbeDNS  ProbeKind = "dns"
)

// icmpUnreach is ICMPv4 type 3, destination unreachable (RFC 792); icmp6Unreach is
// ICMPv6 type 1 (RFC 4443 §3.1).
const (
	icmpUnreach  = 3
	icmp6Unreach = 1
)

// MaxStoredPayload is how many bytes of a reply are kept for re-parsing.
const MaxStoredPayload = 512

// Reply is one response as the sender saw it.
type Reply struct {
	Addr     netip.Addr // the target that answered (for ICMP: the probed address)
	Port     uint16     // the probed port
	Sport    int        // the reply's UDP source port, -1 if none (ICMP)
	Payload  []byte     // UDP payload
	ICMPType int        // -1 unless ICMP
	ICMPCode int
	Received time.Time
}

// Result is the classification of a reply.
type Result struct {
	Kind     Kind
	Reason   string // why a reply is invalid / malformed (not stored; logs and tests)
	Versions []uint32
	Grease   int
	CIDMatch *bool
	DNS      *DNSReply
}

// Classifier classifies replies to the probes it was built with.
type Classifier struct {
	QUIC  QUICProbe
	DNS   DNSProbe
	dnsQ  []byte // the question section of our query
	Ports map[uint16]ProbeKind
}

// NewClassifier returns a classifier for the given probes and port->probe mapping.
func NewClassifier(q QUICProbe, d DNSProbe, ports map[uint16]ProbeKind) (*Classifier, error) {
	msg, err := d.Build()
	if err != nil {
		return nil, err
	}
	return &Classifier{QUIC: q, DNS: d, dnsQ: msg[dnsHeaderLen:], Ports: ports}, nil
}

// ProbeFor returns the probe kind of a port (QUIC unless the port is mapped to DNS).
func (c *Classifier) ProbeFor(port uint16) ProbeKind {
	if k, ok := c.Ports[port]; ok {
		return k
	}
	return ProbeQUIC
}

// Classify classifies one reply. It never panics on any input (fuzzed).
func (c *Classifier) Classify(r Reply) Result {
	if r.ICMPType >= 0 {
		v6 := r.Addr.Is6() && !r.Addr.Is4In6()
		if (!v6 && r.ICMPType == icmpUnreach) || (v6 && r.ICMPType == icmp6Unreach) {
			return Result{Kind: KindICMPUnreach}
		}
		return Result{Kind: KindNotQUIC, Reason: "icmp other than destination unreachable"}
	}
	if c.ProbeFor(r.Port) == ProbeDNS {
		return c.classifyDNS(r.Payload)
	}
	return c.classifyQUIC(r.Payload)
}

func (c *Classifier) classifyQUIC(b []byte) Result {
	vn, err := ParseVN(b)
	switch {
	case err == nil:
	case errors.Is(err, ErrNotLongHeader), errors.Is(err, ErrNotVN):
		if looksQUIC(b) {
			return Result{Kind: KindQUICOther}
		}
		return Result{Kind: KindNotQUIC}
	default:
		f := false
		return Result{Kind: KindQUICVNInvalid, Reason: err.Error(), CIDMatch: &f, Versions: vn.Versions}
	}
	res := Result{Versions: vn.Versions}
	for _, v := range vn.Versions {
		if quicver.IsGrease(v) {
			res.Grease++
		}
	}
	match := vn.EchoesProbe(c.QUIC)
	res.CIDMatch = &match
	switch {
	case !match:
		res.Kind, res.Reason = KindQUICVNInvalid, "connection IDs do not echo the probe's"
	case vn.Lists(c.QUIC.Version):
		res.Kind, res.Reason = KindQUICVNInvalid, "lists the probe's own version (RFC 9000 §6.2)"
	default:
		res.Kind = KindQUICVN
	}
	return res
}

func (c *Classifier) classifyDNS(b []byte) Result {
	d, err := ParseDNSReply(b, c.dnsQ)
	if err != nil {
		return Result{Kind: KindDNSMalformed, Reason: err.Error()}
	}
	if d.ID != c.DNS.ID {
		return Result{Kind: KindDNSMalformed, Reason: "message ID differs from the query's"}
	}
	if !d.QNameOK {
		return Result{Kind: KindDNSMalformed, Reason: "question section differs from the query's", DNS: &d}
	}
	return Result{Kind: KindDNS, DNS: &d}
}

// Row turns a classified reply into a scan_replies row.
func Row(scanID int64, r Reply, res Result) store.ScanReply {
	row := store.ScanReply{
		ScanID:     scanID,
		Port:       int32(r.Port),
		Address:    r.Addr.Unmap(),
		ReplyKind:  string(res.Kind),
		VNCIDMatch: res.CIDMatch,
		ReceivedAt: r.Received,
	}
	if r.Sport >= 0 {
		sp := int32(r.Sport)
		row.Sport = &sp
	}
	if r.ICMPType >= 0 {
		t, c := int16(r.ICMPType), int16(r.ICMPCode)
		row.ICMPType, row.ICMPCode = &t, &c
	} else {
		n := int32(len(r.Payload))
		row.PayloadLen = &n
		row.Payload = r.Payload[:min(len(r.Payload), MaxStoredPayload)]
	}
	if res.Versions != nil {
		row.QUICVersions = make([]int64, len(res.Versions))
		for i, v := range res.Versions {
			row.QUICVersions[i] = int64(v)
		}
		g := int16(res.Grease)
		row.GreaseCount = &g
	}
	if res.DNS != nil {
		rc, an, ra := int16(res.DNS.Rcode), int16(min(res.DNS.Answers, 32767)), res.DNS.RA
		row.DNSRcode, row.DNSAnswers, row.DNSRA = &rc, &an, &ra
	}
	return row
}
