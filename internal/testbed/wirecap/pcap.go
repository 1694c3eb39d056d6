package wirecap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/doqscan/doqscan/internal/ipv4hdr"
	"github.com/doqscan/doqscan/internal/ipv6hdr"
	"github.com/doqscan/doqscan/internal/quicwire"
)

// Classic pcap file layout (draft-ietf-opsawg-pcap, "PCAP Capture File Format":
// §4 File Header, §5 Packet Record; tcpdump's pcap-savefile(5)).
const (
	fileHeaderLen   = 24         // magic, version, reserved1, reserved2, snaplen, link type
	recordHeaderLen = 16         // seconds, sub-seconds, captured length, original length
	magicMicro      = 0xa1b2c3d4 // sub-second field in microseconds
	magicNano       = 0xa1b23c4d // sub-second field in nanoseconds
	linkTypeOffset  = 20         // §4: LinkType and additional information
	linkTypeMask    = 0xffff     // §4: the link type is the low 16 bits (FCS length and flags above)
	// maxRecordLen bounds a record's captured length: no link type here carries more
	// than 256 KiB per packet (libpcap's MAXIMUM_SNAPLEN), so a larger value is garbage.
	maxRecordLen = 262144
)

// Link types (tcpdump.org/linktypes.html; draft-ietf-opsawg-pcaplinktype).
const (
	LinkEthernet = 1   // LINKTYPE_ETHERNET (DLT_EN10MB): IEEE 802.3 header
	LinkRaw      = 101 // LINKTYPE_RAW: the packet starts with an IPv4 or IPv6 header
	LinkIPv4     = 228 // LINKTYPE_IPV4: the packet starts with an IPv4 header
	LinkLinuxSLL = 113 // LINKTYPE_LINUX_SLL: `tcpdump -i any` (16-byte cooked header)
	LinkSLL2     = 276 // LINKTYPE_LINUX_SLL2: `tcpdump -i any` on newer libpcap (20 bytes)
)

// Link-layer headers.
const (
	ethHeaderLen    = 14     // IEEE 802.3 §3.1.1: destination, source, EtherType
	ethTypeOffset   = 12     // EtherType / length field
	vlanTagLen      = 4      // IEEE 802.1Q §9.6: TPID + TCI
	etherTypeIPv4   = 0x0800 // RFC 894
	etherTypeIPv6   = 0x86dd // RFC 2464
	etherTypeVLAN   = 0x8100 // IEEE 802.1Q C-tag
	etherTypeQinQ   = 0x88a8 // IEEE 802.1ad S-tag
	maxVLANTags     = 2
	sllHeaderLen    = 16 // LINKTYPE_LINUX_SLL: protocol type at offset 14
	sllProtoOffset  = 14
	sll2HeaderLen   = 20 // LINKTYPE_LINUX_SLL2: protocol type at offset 0
	sll2ProtoOffset = 0
)

// Transport protocols (IANA protocol numbers) and headers.
const (
	ProtoTCP = 6  // RFC 9293
	ProtoUDP = 17 // RFC 768

	tcpMinHeaderLen  = 20 // RFC 9293 §3.1: data offset 5 words
	tcpSeqOffset     = 4
	tcpAckOffset     = 8
	tcpDataOffOffset = 12 // data offset in the high 4 bits, in 32-bit words
	tcpFlagsOffset   = 13
	udpHeaderLen     = 8 // RFC 768
)

// TCP control bits (RFC 9293 §3.1, the low byte of the flags field).
const (
	TCPFin = 0x01
	TCPSyn = 0x02
	TCPRst = 0x04
	TCPPsh = 0x08
	TCPAck = 0x10
)

// Packet is one IPv4 or IPv6 TCP or UDP packet of a capture.
type Packet struct {
	At       time.Time      // capture timestamp (CLOCK_REALTIME of the capturing host)
	Src, Dst netip.AddrPort // IP addresses and transport ports
	Proto    uint8          // ProtoTCP or ProtoUDP
	TCPFlags uint8          // TCP control bits (TCPSyn...); 0 for UDP
	Seq, Ack uint32         // TCP sequence and acknowledgment numbers; 0 for UDP
	// Payload is the transport payload in bytes, from the IP total length (not the
	// captured length, which the snaplen cuts). For the first fragment of a fragmented
	// datagram it is what that fragment carries; later fragments are skipped.
	Payload int
	// QUIC is what a UDP datagram's payload shows read as QUIC without keys
	// (quicwire.Packets: the types of its coalesced packets, as far as the snaplen
	// lets them be read); meaningless for a datagram that is not QUIC.
	QUIC QUICTypes
	// SCID is the Source Connection ID of the datagram's first long-header QUIC packet
	// (quicwire.Packet.SCID), "" if none: one per client connection, so it tells apart
	// two connections whose sockets the kernel gave the same port.
	SCID string
	// Lead is the first two bytes of a UDP payload (0 if shorter): a DNS message's ID
	// (RFC 1035 §4.1.1), meaningless for other payloads.
	Lead uint16
}

// QUICTypes is a set of QUIC packet types (quicwire.Type).
type QUICTypes uint8

// Has reports whether t is in the set.
func (q QUICTypes) Has(t quicwire.Type) bool { return q&(1<<t) != 0 }

// quicTypes reads the packet types of a QUIC datagram of size bytes whose first bytes are
// b, and the SCID of its first long-header packet. A datagram whose first byte lacks the
// fixed bit is not QUIC (RFC 9000 §17.2, §17.3; the testbed's servers do not grease it,
// RFC 9287): none.
func quicTypes(b []byte, size int) (QUICTypes, string) {
	if len(b) == 0 || b[0]&0x40 == 0 {
		return 0, ""
	}
	var (
		q    QUICTypes
		scid string
		seen bool
	)
	for _, p := range quicwire.Packets(b, size) {
		q |= 1 << p.Type
		if p.SCID != nil && !seen {
			scid, seen = string(p.SCID), true
		}
	}
	return q, scid
}

// Errors of Parse and Reader.Next (wrapped with the record number and offset).
var (
	ErrBadMagic     = errors.New("not a classic pcap file (bad magic number)")
	ErrTruncated    = errors.New("pcap file truncated")
	ErrBadRecord    = errors.New("bad pcap record header")
	ErrBadLinkType  = errors.New("unsupported pcap link type")
	ErrBadPacket    = errors.New("malformed packet")
	errNotTransport = errors.New("not an IP TCP/UDP packet") // skipped, never returned
)

// Reader decodes a classic pcap stream packet by packet. Records that are not IPv4/IPv6 TCP
// or UDP (ARP, IPv6, ICMP, later fragments...) are skipped and counted in Skipped.
type Reader struct {
	r        io.Reader
	order    binary.ByteOrder
	nano     bool
	linkType uint32
	record   int   // records read so far
	offset   int64 // bytes consumed so far
	hdr      [recordHeaderLen]byte
	buf      []byte
	Skipped  int // records skipped as not IPv4/IPv6 TCP/UDP
}

// NewReader reads the file header of a classic pcap stream.
func NewReader(r io.Reader) (*Reader, error) {
	var h [fileHeaderLen]byte
	if n, err := io.ReadFull(r, h[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("pcap file header: %w (empty input)", ErrTruncated)
		}
		return nil, fmt.Errorf("pcap file header (%d of %d bytes): %w", n, fileHeaderLen, ErrTruncated)
	}
	rd := &Reader{r: r, offset: fileHeaderLen}
	switch {
	case binary.LittleEndian.Uint32(h[:]) == magicMicro:
		rd.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h[:]) == magicMicro:
		rd.order = binary.BigEndian
	case binary.LittleEndian.Uint32(h[:]) == magicNano:
		rd.order, rd.nano = binary.LittleEndian, true
	case binary.BigEndian.Uint32(h[:]) == magicNano:
		rd.order, rd.nano = binary.BigEndian, true
	default:
		return nil, fmt.Errorf("%w: %#08x", ErrBadMagic, binary.BigEndian.Uint32(h[:]))
	}
	rd.linkType = rd.order.Uint32(h[linkTypeOffset:]) & linkTypeMask
	switch rd.linkType {
	case LinkEthernet, LinkRaw, LinkIPv4, LinkLinuxSLL, LinkSLL2:
	default:
		return nil, fmt.Errorf("%w %d (want 1 Ethernet, 101 raw, 228 IPv4, 113/276 Linux cooked)", ErrBadLinkType, rd.linkType)
	}
	return rd, nil
}

// Next returns the next IPv4/IPv6 TCP/UDP packet, io.EOF at the clean end of the stream, or
// an error for truncated or malformed input.
func (rd *Reader) Next() (Packet, error) {
	for {
		n, err := io.ReadFull(rd.r, rd.hdr[:])
		if err != nil {
			if n == 0 && errors.Is(err, io.EOF) {
				return Packet{}, io.EOF
			}
			return Packet{}, rd.errorf(ErrTruncated, "record header (%d of %d bytes)", n, recordHeaderLen)
		}
		sec := rd.order.Uint32(rd.hdr[0:])
		sub := rd.order.Uint32(rd.hdr[4:])
		incl := rd.order.Uint32(rd.hdr[8:])
		orig := rd.order.Uint32(rd.hdr[12:])
		if incl > maxRecordLen {
			return Packet{}, rd.errorf(ErrBadRecord, "captured length %d > %d", incl, maxRecordLen)
		}
		if orig < incl {
			return Packet{}, rd.errorf(ErrBadRecord, "original length %d < captured length %d", orig, incl)
		}
		var nsec int64
		if rd.nano {
			if sub >= 1e9 {
				return Packet{}, rd.errorf(ErrBadRecord, "nanoseconds %d >= 1e9", sub)
			}
			nsec = int64(sub)
		} else {
			if sub >= 1e6 {
				return Packet{}, rd.errorf(ErrBadRecord, "microseconds %d >= 1e6", sub)
			}
			nsec = int64(sub) * 1e3
		}
		if cap(rd.buf) < int(incl) {
			rd.buf = make([]byte, incl)
		}
		data := rd.buf[:incl]
		if m, err := io.ReadFull(rd.r, data); err != nil {
			return Packet{}, rd.errorf(ErrTruncated, "record data (%d of %d bytes)", m, incl)
		}
		rd.record++
		rd.offset += recordHeaderLen + int64(incl)
		p, err := rd.decode(data)
		if errors.Is(err, errNotTransport) {
			rd.Skipped++
			continue
		}
		if err != nil {
			return Packet{}, fmt.Errorf("pcap record %d (ending at byte %d): %w", rd.record, rd.offset, err)
		}
		p.At = time.Unix(int64(sec), nsec)
		return p, nil
	}
}

func (rd *Reader) errorf(kind error, format string, a ...any) error {
	return fmt.Errorf("pcap record %d (at byte %d): %w: %s", rd.record+1, rd.offset, kind, fmt.Sprintf(format, a...))
}

// decode strips the link header and decodes the IP and transport headers.
func (rd *Reader) decode(b []byte) (Packet, error) {
	switch rd.linkType {
	case LinkEthernet:
		if len(b) < ethHeaderLen {
			return Packet{}, fmt.Errorf("%w: %d-byte Ethernet frame", ErrBadPacket, len(b))
		}
		et := binary.BigEndian.Uint16(b[ethTypeOffset:])
		b = b[ethHeaderLen:]
		for tags := 0; (et == etherTypeVLAN || et == etherTypeQinQ) && tags < maxVLANTags; tags++ {
			if len(b) < vlanTagLen {
				return Packet{}, fmt.Errorf("%w: truncated VLAN tag", ErrBadPacket)
			}
			et = binary.BigEndian.Uint16(b[2:])
			b = b[vlanTagLen:]
		}
		if et != etherTypeIPv4 && et != etherTypeIPv6 {
			return Packet{}, errNotTransport
		}
	case LinkLinuxSLL, LinkSLL2:
		hdr, protoOff, what := sllHeaderLen, sllProtoOffset, "Linux cooked"
		if rd.linkType == LinkSLL2 {
			hdr, protoOff, what = sll2HeaderLen, sll2ProtoOffset, "Linux cooked v2"
		}
		if len(b) < hdr {
			return Packet{}, fmt.Errorf("%w: %d-byte %s header", ErrBadPacket, len(b), what)
		}
		if et := binary.BigEndian.Uint16(b[protoOff:]); et != etherTypeIPv4 && et != etherTypeIPv6 {
			return Packet{}, errNotTransport
		}
		b = b[hdr:]
	case LinkRaw:
		if len(b) > 0 && b[0]>>4 != ipv4hdr.Version && b[0]>>4 != ipv6hdr.Version {
			return Packet{}, errNotTransport // garbage we cannot tell from anything
		}
	case LinkIPv4:
		if len(b) > 0 && b[0]>>4 != ipv4hdr.Version {
			return Packet{}, fmt.Errorf("%w: IP version %d on an IPv4 link", ErrBadPacket, b[0]>>4)
		}
	}
	return decodeIP(b)
}

// decodeIP decodes an IPv4 or IPv6 packet (by its version nibble; possibly cut by the
// snaplen after the transport header; packages ipv4hdr and ipv6hdr read the IP header).
func decodeIP(b []byte) (Packet, error) {
	var src, dst netip.Addr
	var proto uint8
	var ihl, total, frag int
	switch {
	case len(b) > 0 && b[0]>>4 == ipv6hdr.Version:
		h, err := ipv6hdr.Parse(b)
		if err != nil {
			return Packet{}, fmt.Errorf("%w: %v (captured %d bytes)", ErrBadPacket, err, len(b))
		}
		src, dst, proto, ihl, total, frag = h.Src, h.Dst, h.Proto, h.HeaderLen, h.TotalLen, h.Fragment
		if ihl > total {
			return Packet{}, fmt.Errorf("%w: IPv6 extension headers (%d bytes) beyond the payload length %d", ErrBadPacket, ihl, total)
		}
	default:
		h, err := ipv4hdr.Parse(b)
		if err != nil {
			return Packet{}, fmt.Errorf("%w: %v (captured %d bytes)", ErrBadPacket, err, len(b))
		}
		src, dst, proto, ihl, total, frag = h.Src, h.Dst, h.Proto, h.HeaderLen, h.TotalLen, h.Fragment
	}
	return decodeTransport(b, src, dst, proto, ihl, total, frag)
}

// decodeTransport decodes the TCP or UDP header at b[ihl:] of an IP datagram of total
// bytes.
func decodeTransport(b []byte, src, dst netip.Addr, proto uint8, ihl, total, frag int) (Packet, error) {
	if proto != ProtoTCP && proto != ProtoUDP {
		return Packet{}, errNotTransport
	}
	if frag != 0 {
		return Packet{}, errNotTransport // a later fragment: no transport header
	}
	t := b[ihl:]
	p := Packet{Proto: proto}
	switch proto {
	case ProtoTCP:
		if len(t) < tcpMinHeaderLen {
			return Packet{}, fmt.Errorf("%w: TCP header not captured (%d bytes)", ErrBadPacket, len(t))
		}
		doff := int(t[tcpDataOffOffset]>>4) * 4
		if doff < tcpMinHeaderLen || ihl+doff > total {
			return Packet{}, fmt.Errorf("%w: TCP data offset %d, IP total length %d", ErrBadPacket, doff, total)
		}
		p.TCPFlags = t[tcpFlagsOffset]
		p.Seq = binary.BigEndian.Uint32(t[tcpSeqOffset:])
		p.Ack = binary.BigEndian.Uint32(t[tcpAckOffset:])
		p.Payload = total - ihl - doff
	case ProtoUDP:
		if len(t) < udpHeaderLen {
			return Packet{}, fmt.Errorf("%w: UDP header not captured (%d bytes)", ErrBadPacket, len(t))
		}
		if total < ihl+udpHeaderLen {
			return Packet{}, fmt.Errorf("%w: IP total length %d too short for UDP", ErrBadPacket, total)
		}
		p.Payload = total - ihl - udpHeaderLen
		u := t[udpHeaderLen:]
		p.QUIC, p.SCID = quicTypes(u, p.Payload)
		if len(u) >= 2 {
			p.Lead = binary.BigEndian.Uint16(u)
		}
	}
	p.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(t[0:]))
	p.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(t[2:]))
	return p, nil
}

// Parse reads a whole classic pcap file and returns its IPv4 TCP and UDP packets in file
// order. Other packets are skipped; truncated or malformed input is an error.
func Parse(r io.Reader) ([]Packet, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	var out []Packet
	for {
		p, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
}
