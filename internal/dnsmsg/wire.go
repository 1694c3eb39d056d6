package dnsmsg

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// maxNameWire is the longest domain name in wire form (RFC 1035 §3.1).
const maxNameWire = 255

// maxPointers bounds the compression pointers one name may follow (miekg/dns's limit).
const maxPointers = (maxNameWire+1)/2 - 2

// appendName appends name (presentation form, no escapes, trailing dot optional) in
// wire form, or reports false when the name needs miekg/dns (escapes, bad labels).
func appendName(b []byte, name string) ([]byte, bool) {
	if strings.IndexByte(name, '\\') >= 0 {
		return b, false
	}
	name = strings.TrimSuffix(name, ".")
	start := len(b)
	for name != "" {
		l, rest, _ := strings.Cut(name, ".")
		if l == "" || len(l) > 63 {
			return b[:start], false
		}
		b = append(b, byte(len(l)))
		b = append(b, l...)
		name = rest
	}
	b = append(b, 0)
	if len(b)-start > maxNameWire {
		return b[:start], false
	}
	return b, true
}

// appendQuery appends the wire form of q (what Build returns) without miekg/dns, or
// reports false when q's name needs it.
func appendQuery(b []byte, q Query) ([]byte, bool) {
	t := q.Type
	if t == 0 {
		t = dns.TypeA
	}
	start := len(b)
	// ID, flags (RD), QDCOUNT 1, ANCOUNT 0, NSCOUNT 0, ARCOUNT 1 (the OPT record)
	b = append(b, byte(q.ID>>8), byte(q.ID), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1)
	b, ok := appendName(b, q.Name)
	if !ok {
		return b[:start], false
	}
	b = binary.BigEndian.AppendUint16(b, t)
	b = binary.BigEndian.AppendUint16(b, dns.ClassINET)
	// OPT (RFC 6891 §6.1.2): root owner, type 41, class = UDP payload size, TTL 0.
	b = append(b, 0, 0, 41)
	b = binary.BigEndian.AppendUint16(b, EDNSBufferSize)
	b = append(b, 0, 0, 0, 0)
	if q.TCPKeepalive {
		// RDLENGTH 4: edns-tcp-keepalive (code 11), no timeout (RFC 7828 §3.1).
		b = append(b, 0, 4, 0, byte(dns.EDNS0TCPKEEPALIVE), 0, 0)
	} else {
		b = append(b, 0, 0)
	}
	return b, true
}

// skipName returns the offset just past the (possibly compressed) name at off.
func skipName(msg []byte, off int) (int, error) {
	for {
		if off >= len(msg) {
			return 0, fmt.Errorf("%w: name runs past the message", ErrBadResponse)
		}
		c := int(msg[off])
		switch c & 0xC0 {
		case 0x00:
			if c == 0 {
				return off + 1, nil
			}
			off += 1 + c
		case 0xC0:
			if off+2 > len(msg) {
				return 0, fmt.Errorf("%w: name runs past the message", ErrBadResponse)
			}
			return off + 2, nil
		default:
			return 0, fmt.Errorf("%w: bad label type 0x%02x", ErrBadResponse, c)
		}
	}
}

// nameEqual reports whether the name at off in msg (following compression pointers)
// is want (wire form, uncompressed), ignoring ASCII case (RFC 4343).
func nameEqual(msg []byte, off int, want []byte) (bool, error) {
	w, hops := 0, 0
	for {
		if off >= len(msg) {
			return false, fmt.Errorf("%w: name runs past the message", ErrBadResponse)
		}
		c := int(msg[off])
		switch c & 0xC0 {
		case 0x00:
			if off+1+c > len(msg) {
				return false, fmt.Errorf("%w: name runs past the message", ErrBadResponse)
			}
			if w >= len(want) || int(want[w]) != c {
				return false, nil
			}
			if c == 0 {
				return w+1 == len(want), nil
			}
			if w+1+c > len(want) {
				return false, nil
			}
			for i := 1; i <= c; i++ {
				if lower(msg[off+i]) != lower(want[w+i]) {
					return false, nil
				}
			}
			w += 1 + c
			off += 1 + c
		case 0xC0:
			if off+2 > len(msg) {
				return false, fmt.Errorf("%w: name runs past the message", ErrBadResponse)
			}
			if hops++; hops > maxPointers {
				return false, fmt.Errorf("%w: too many compression pointers", ErrBadResponse)
			}
			off = int(binary.BigEndian.Uint16(msg[off:]) & 0x3FFF)
		default:
			return false, fmt.Errorf("%w: bad label type 0x%02x", ErrBadResponse, c)
		}
	}
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Check judges raw as an answer to q on the wire bytes, without unpacking its records:
// QR set, q's ID, q's question (the first, compared case-insensitively; a server may
// omit it unless the rcode is NOERROR), and every record the header counts present
// and inside the message (owner name, fixed fields, RDLENGTH). It returns the rcode,
// extended by an OPT record's upper bits. It accepts every message Validate accepts,
// with the same rcode; unlike Validate it does not look inside RDATA. Names that need
// escapes are checked by Validate.
func Check(q Query, raw []byte) (int, error) {
	var nb [maxNameWire + 1]byte
	want, ok := appendName(nb[:0], q.Name)
	if !ok {
		r, err := Validate(q, raw)
		if err != nil {
			return 0, err
		}
		return r.Rcode, nil
	}
	if len(raw) < dnsHeaderLen {
		return 0, fmt.Errorf("%w: %d bytes, shorter than a header", ErrBadResponse, len(raw))
	}
	id := binary.BigEndian.Uint16(raw)
	flags := binary.BigEndian.Uint16(raw[2:])
	qd := int(binary.BigEndian.Uint16(raw[4:]))
	an, ns, ar := int(binary.BigEndian.Uint16(raw[6:])), int(binary.BigEndian.Uint16(raw[8:])), int(binary.BigEndian.Uint16(raw[10:]))
	rcode := int(flags & 0xF)
	off := dnsHeaderLen
	questions := 0
	if off < len(raw) {
		for range qd {
			if questions == 0 {
				match, err := nameEqual(raw, off, want)
				if err != nil {
					return 0, err
				}
				end, err := skipName(raw, off)
				if err != nil {
					return 0, err
				}
				if end+4 > len(raw) {
					return 0, fmt.Errorf("%w: question runs past the message", ErrBadResponse)
				}
				t := q.Type
				if t == 0 {
					t = dns.TypeA
				}
				if !match || binary.BigEndian.Uint16(raw[end:]) != t {
					return 0, fmt.Errorf("%w: question is not %s/%d", ErrBadResponse, dns.Fqdn(q.Name), t)
				}
				off = end + 4
			} else {
				end, err := skipName(raw, off)
				if err != nil {
					return 0, err
				}
				if end+4 > len(raw) {
					return 0, fmt.Errorf("%w: question runs past the message", ErrBadResponse)
				}
				off = end + 4
			}
			questions++
		}
		optTTL, hasOpt := uint32(0), false
		for i := range an + ns + ar {
			end, err := skipName(raw, off)
			if err != nil {
				return 0, fmt.Errorf("%w: truncated message: header counts %d/%d/%d records", err, an, ns, ar)
			}
			if end+10 > len(raw) {
				return 0, fmt.Errorf("%w: truncated message: header counts %d/%d/%d records", ErrBadResponse, an, ns, ar)
			}
			rdlen := int(binary.BigEndian.Uint16(raw[end+8:]))
			if end+10+rdlen > len(raw) {
				return 0, fmt.Errorf("%w: truncated message: header counts %d/%d/%d records", ErrBadResponse, an, ns, ar)
			}
			if i >= an+ns && binary.BigEndian.Uint16(raw[end:]) == dns.TypeOPT {
				optTTL, hasOpt = binary.BigEndian.Uint32(raw[end+4:]), true
			}
			off = end + 10 + rdlen
		}
		if hasOpt {
			rcode |= int(optTTL>>24) << 4
		}
	} else if an+ns+ar > 0 {
		return 0, fmt.Errorf("%w: truncated message: header counts %d/%d/%d records, message holds none", ErrBadResponse, an, ns, ar)
	}
	if flags&0x8000 == 0 {
		return 0, fmt.Errorf("%w: QR bit not set", ErrBadResponse)
	}
	if id != q.ID {
		return 0, fmt.Errorf("%w: id %d, want %d", ErrBadResponse, id, q.ID)
	}
	if questions == 0 && rcode == dns.RcodeSuccess {
		return 0, fmt.Errorf("%w: NOERROR without a question", ErrBadResponse)
	}
	return rcode, nil
}
