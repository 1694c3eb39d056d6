package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/doqscan/doqscan/internal/dnsmsg"
)

// DNS wire constants (RFC 1035 §4.1).
const (
	dnsHeaderLen  = 12
	dnsTypeA      = 1      // RFC 1035 §3.2.2
	dnsClassIN    = 1      // RFC 1035 §3.2.4
	dnsFlagQR     = 0x8000 // response (RFC 1035 §4.1.1)
	dnsFlagRD     = 0x0100 // recursion desired
	dnsFlagRA     = 0x0080 // recursion available
	dnsOpcodeMask = 0x7800
	dnsRcodeMask  = 0x000f
	dnsMaxLabel   = 63  // RFC 1035 §2.3.4
	dnsMaxName    = 255 // RFC 1035 §2.3.4
	dnsPointer    = 0xc0
	// DefaultDNSID is the message ID of the DNS probe: zmap sends one payload to every
	// target, so the ID is a constant ("DQ") that replies must echo.
	DefaultDNSID = 0x4451
)

// DNSProbe describes the UDP/53 query: QTYPE A, QCLASS IN, RD set.
type DNSProbe struct {
	ID    uint16
	QName string // fully qualified or not; a trailing dot is added
}

// DefaultDNSProbe is the DNS query zprobe sends unless told otherwise.
func DefaultDNSProbe() DNSProbe { return DNSProbe{ID: DefaultDNSID, QName: dnsmsg.DefaultQueryName} }

// encodeName returns the wire form of a domain name (RFC 1035 §3.1), lower-cased.
func encodeName(name string) ([]byte, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	var b []byte
	if name != "" {
		for _, l := range strings.Split(name, ".") {
			if l == "" || len(l) > dnsMaxLabel {
				return nil, fmt.Errorf("dns name %q: label %q is empty or longer than %d bytes", name, l, dnsMaxLabel)
			}
			b = append(b, byte(len(l)))
			b = append(b, l...)
		}
	}
	b = append(b, 0)
	if len(b) > dnsMaxName {
		return nil, fmt.Errorf("dns name %q: longer than %d bytes", name, dnsMaxName)
	}
	return b, nil
}

// Build returns the query message.
func (p DNSProbe) Build() ([]byte, error) {
	qn, err := encodeName(p.QName)
	if err != nil {
		return nil, err
	}
	b := make([]byte, dnsHeaderLen, dnsHeaderLen+len(qn)+4)
	binary.BigEndian.PutUint16(b[0:], p.ID)
	binary.BigEndian.PutUint16(b[2:], dnsFlagRD)
	binary.BigEndian.PutUint16(b[4:], 1) // QDCOUNT
	b = append(b, qn...)
	b = binary.BigEndian.AppendUint16(b, dnsTypeA)
	b = binary.BigEndian.AppendUint16(b, dnsClassIN)
	return b, nil
}

// DNSReply is what the scan keeps of a DNS response.
type DNSReply struct {
	ID       uint16
	Rcode    int  // header RCODE (RFC 1035 §4.1.1)
	Answers  int  // ANCOUNT
	RA       bool // recursion available
	QNameOK  bool // the question section names our query
	Sections int  // resource records walked
}

// Errors of ParseDNSReply.
var (
	ErrDNSShort    = errors.New("dns: shorter than a header")
	ErrDNSQuery    = errors.New("dns: QR bit clear (a query, not a response)")
	ErrDNSName     = errors.New("dns: malformed name")
	ErrDNSRecord   = errors.New("dns: truncated resource record")
	ErrDNSOpcode   = errors.New("dns: opcode is not QUERY")
	ErrDNSTrailing = errors.New("dns: bytes after the last record")
)

// skipName returns the offset after the (possibly compressed) name at off.
func skipName(b []byte, off int) (int, error) {
	for n := 0; ; n++ {
		if off >= len(b) || n > dnsMaxName {
			return 0, ErrDNSName
		}
		l := int(b[off])
		switch {
		case l == 0:
			return off + 1, nil
		case l&dnsPointer == dnsPointer:
			if off+2 > len(b) {
				return 0, ErrDNSName
			}
			return off + 2, nil // a pointer ends the name (RFC 1035 §4.1.4)
		case l&dnsPointer != 0:
			return 0, ErrDNSName // 0x40/0x80 label types: obsolete (RFC 6891 §5)
		}
		off += 1 + l
	}
}

// ParseDNSReply walks a DNS response: header, question and every resource record's
// bounds (RFC 1035 §4.1). It does not decompress names or interpret RDATA.
func ParseDNSReply(b []byte, q []byte) (DNSReply, error) {
	var r DNSReply
	if len(b) < dnsHeaderLen {
		return r, ErrDNSShort
	}
	r.ID = binary.BigEndian.Uint16(b)
	flags := binary.BigEndian.Uint16(b[2:])
	if flags&dnsFlagQR == 0 {
		return r, ErrDNSQuery
	}
	if flags&dnsOpcodeMask != 0 {
		return r, ErrDNSOpcode
	}
	r.Rcode = int(flags & dnsRcodeMask)
	r.RA = flags&dnsFlagRA != 0
	qd := int(binary.BigEndian.Uint16(b[4:]))
	an := int(binary.BigEndian.Uint16(b[6:]))
	ns := int(binary.BigEndian.Uint16(b[8:]))
	ar := int(binary.BigEndian.Uint16(b[10:]))
	r.Answers = an
	off := dnsHeaderLen
	for i := 0; i < qd; i++ {
		end, err := skipName(b, off)
		if err != nil {
			return r, err
		}
		if end+4 > len(b) {
			return r, ErrDNSRecord
		}
		if i == 0 && q != nil && equalFoldASCII(b[off:end+4], q) {
			r.QNameOK = true
		}
		off = end + 4
	}
	for i := 0; i < an+ns+ar; i++ {
		end, err := skipName(b, off)
		if err != nil {
			return r, err
		}
		if end+10 > len(b) {
			return r, ErrDNSRecord
		}
		rdlen := int(binary.BigEndian.Uint16(b[end+8:]))
		off = end + 10 + rdlen
		if off > len(b) {
			return r, ErrDNSRecord
		}
		r.Sections++
	}
	if off != len(b) {
		return r, ErrDNSTrailing
	}
	return r, nil
}

// equalFoldASCII compares wire bytes ignoring ASCII case (names are case-insensitive,
// RFC 4343; resolvers may echo 0x20-mixed case).
func equalFoldASCII(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
