package wirecap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/ipv4hdr"
	"github.com/doqscan/doqscan/internal/quicwire"
)

// spec describes a packet the tests build byte by byte.
type spec struct {
	at       time.Time
	src, dst netip.AddrPort
	proto    uint8
	flags    uint8
	seq, ack uint32
	payload  int
	ipOpts   int    // IPv4 option bytes (multiple of 4)
	tcpOpts  int    // TCP option bytes (multiple of 4)
	frag     uint16 // fragment offset field (flags + offset)
}

// want is the Packet Parse must return for s.
func (s spec) want(nano bool) Packet {
	at := s.at
	if !nano {
		at = at.Truncate(time.Microsecond)
	}
	at = time.Unix(at.Unix(), int64(at.Nanosecond())) // what Parse returns (local zone)
	p := Packet{At: at, Src: s.src, Dst: s.dst, Proto: s.proto, Payload: s.payload}
	if s.proto == ProtoTCP {
		p.TCPFlags, p.Seq, p.Ack = s.flags, s.seq, s.ack
	}
	if s.proto == ProtoUDP && s.payload >= 2 {
		p.Lead = 0x0001 // the payload's bytes count up from 0
	}
	return p
}

// ipv4 builds the whole IPv4 packet of s (payload bytes included).
func (s spec) ipv4() []byte {
	ihl := ipv4hdr.MinHeaderLen + s.ipOpts
	var th []byte
	switch s.proto {
	case ProtoTCP:
		doff := tcpMinHeaderLen + s.tcpOpts
		th = make([]byte, doff)
		binary.BigEndian.PutUint32(th[tcpSeqOffset:], s.seq)
		binary.BigEndian.PutUint32(th[tcpAckOffset:], s.ack)
		th[tcpDataOffOffset] = byte(doff/4) << 4
		th[tcpFlagsOffset] = s.flags
	case ProtoUDP:
		th = make([]byte, udpHeaderLen)
		binary.BigEndian.PutUint16(th[4:], uint16(udpHeaderLen+s.payload))
	default:
		th = make([]byte, 8) // e.g. ICMP echo
	}
	if len(th) >= 4 {
		binary.BigEndian.PutUint16(th[0:], s.src.Port())
		binary.BigEndian.PutUint16(th[2:], s.dst.Port())
	}
	b := make([]byte, ihl, ihl+len(th)+s.payload)
	b[0] = ipv4hdr.Version<<4 | byte(ihl/4)
	binary.BigEndian.PutUint16(b[ipv4hdr.TotalLenOffset:], uint16(ihl+len(th)+s.payload))
	binary.BigEndian.PutUint16(b[ipv4hdr.FragOffset:], s.frag)
	b[8] = 64
	b[ipv4hdr.ProtoOffset] = s.proto
	src, dst := s.src.Addr().As4(), s.dst.Addr().As4()
	copy(b[ipv4hdr.SrcOffset:], src[:])
	copy(b[ipv4hdr.DstOffset:], dst[:])
	b = append(b, th...)
	for i := 0; i < s.payload; i++ {
		b = append(b, byte(i))
	}
	return b
}

// frame wraps an IP packet in the link header of link (ethertype et).
func frame(link uint32, et uint16, ip []byte, vlans int) []byte {
	switch link {
	case LinkEthernet:
		h := make([]byte, 12, ethHeaderLen+vlanTagLen*vlans+len(ip))
		copy(h, []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2})
		for i := 0; i < vlans; i++ {
			h = binary.BigEndian.AppendUint16(h, etherTypeVLAN)
			h = binary.BigEndian.AppendUint16(h, uint16(100+i))
		}
		h = binary.BigEndian.AppendUint16(h, et)
		return append(h, ip...)
	case LinkLinuxSLL:
		h := make([]byte, sllHeaderLen)
		binary.BigEndian.PutUint16(h[sllProtoOffset:], et)
		return append(h, ip...)
	case LinkSLL2:
		h := make([]byte, sll2HeaderLen)
		binary.BigEndian.PutUint16(h[sll2ProtoOffset:], et)
		return append(h, ip...)
	}
	return append([]byte(nil), ip...)
}

type record struct {
	at   time.Time
	data []byte
	orig int // 0: len(data)
}

type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// pcapFile writes a classic pcap file; snap cuts every record's data (0: no cut).
func pcapFile(order byteOrder, nano bool, link uint32, snap int, recs []record) []byte {
	var b []byte
	magic := uint32(magicMicro)
	if nano {
		magic = magicNano
	}
	b = order.AppendUint32(b, magic)
	b = order.AppendUint16(b, 2)
	b = order.AppendUint16(b, 4)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, uint32(max(snap, 65535)))
	b = order.AppendUint32(b, link)
	for _, r := range recs {
		data := r.data
		orig := r.orig
		if orig == 0 {
			orig = len(data)
		}
		if snap > 0 && len(data) > snap {
			data = data[:snap]
		}
		sub := uint32(r.at.Nanosecond())
		if !nano {
			sub /= 1000
		}
		b = order.AppendUint32(b, uint32(r.at.Unix()))
		b = order.AppendUint32(b, sub)
		b = order.AppendUint32(b, uint32(len(data)))
		b = order.AppendUint32(b, uint32(orig))
		b = append(b, data...)
	}
	return b
}

var (
	client = netip.MustParseAddrPort("198.18.0.2:40001")
	server = netip.MustParseAddrPort("198.19.3.2:53")
	t0     = time.Date(2026, 11, 22, 9, 0, 0, 123456789, time.UTC)
)

// mixedSpecs is a capture's worth of packets: a TCP handshake with options, data, UDP,
// IP options, and packets Parse must skip (ICMP, a later fragment).
func mixedSpecs() (keep []spec, skip []spec) {
	keep = []spec{
		{at: t0, src: client, dst: server, proto: ProtoTCP, flags: TCPSyn, seq: 1000, tcpOpts: 20},
		{at: t0.Add(20 * time.Millisecond), src: server, dst: client, proto: ProtoTCP, flags: TCPSyn | TCPAck, seq: 5000, ack: 1001, tcpOpts: 20},
		{at: t0.Add(20*time.Millisecond + 3*time.Microsecond), src: client, dst: server, proto: ProtoTCP, flags: TCPAck, seq: 1001, ack: 5001, tcpOpts: 12},
		{at: t0.Add(21 * time.Millisecond), src: client, dst: server, proto: ProtoTCP, flags: TCPAck | TCPPsh, seq: 1001, ack: 5001, payload: 700, tcpOpts: 12},
		{at: t0.Add(41 * time.Millisecond), src: server, dst: client, proto: ProtoUDP, payload: 0},
		{at: t0.Add(42 * time.Millisecond), src: client, dst: server, proto: ProtoUDP, payload: 1400, ipOpts: 8},
		{at: t0.Add(43 * time.Millisecond), src: server, dst: client, proto: ProtoUDP, payload: 1472, frag: 0x2000}, // first fragment (MF)
	}
	skip = []spec{
		{at: t0.Add(30 * time.Millisecond), src: client, dst: server, proto: 1},                                    // ICMP
		{at: t0.Add(43*time.Millisecond + time.Microsecond), src: server, dst: client, proto: ProtoUDP, frag: 185}, // later fragment
	}
	return keep, skip
}

func TestParseFormats(t *testing.T) {
	keep, skip := mixedSpecs()
	for _, order := range []byteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, nano := range []bool{false, true} {
			for _, link := range []uint32{LinkEthernet, LinkRaw, LinkIPv4, LinkLinuxSLL, LinkSLL2} {
				for _, snap := range []int{0, SnapLen} {
					name := fmt.Sprintf("%v/nano=%v/link%d/snap%d", order, nano, link, snap)
					t.Run(name, func(t *testing.T) {
						var recs []record
						var want []Packet
						for i, s := range keep {
							recs = append(recs, record{at: s.at, data: frame(link, etherTypeIPv4, s.ipv4(), i%3) /* 0..2 VLAN tags on Ethernet */})
							want = append(want, s.want(nano))
							if i == 2 { // interleave what must be skipped
								for _, k := range skip {
									recs = append(recs, record{at: k.at, data: frame(link, etherTypeIPv4, k.ipv4(), 0)})
								}
							}
						}
						wantSkipped := len(skip)
						switch link { // a non-IPv4 record of each link type
						case LinkEthernet, LinkLinuxSLL, LinkSLL2:
							recs = append(recs, record{at: t0, data: frame(link, 0x0806, make([]byte, 28), 0)}) // ARP
							wantSkipped++
						case LinkRaw: // an ICMPv6 packet
							v6 := make([]byte, 48)
							v6[0], v6[5], v6[6] = 6<<4, 8, 58
							recs = append(recs, record{at: t0, data: v6})
							wantSkipped++
						}
						file := pcapFile(order, nano, link, snap, recs)
						rd, err := NewReader(bytes.NewReader(file))
						if err != nil {
							t.Fatal(err)
						}
						var got []Packet
						for {
							p, err := rd.Next()
							if err != nil {
								if !errors.Is(err, io.EOF) {
									t.Fatalf("after %d packets: %v", len(got), err)
								}
								break
							}
							got = append(got, p)
						}
						if len(got) != len(want) {
							t.Fatalf("got %d packets, want %d: %+v", len(got), len(want), got)
						}
						for i := range want {
							if got[i] != want[i] {
								t.Errorf("packet %d:\n got  %+v\n want %+v", i, got[i], want[i])
							}
						}
						if rd.Skipped != wantSkipped {
							t.Errorf("skipped %d, want %d", rd.Skipped, wantSkipped)
						}
						all, err := Parse(bytes.NewReader(file))
						if err != nil || len(all) != len(want) {
							t.Errorf("Parse: %d packets, %v", len(all), err)
						}
					})
				}
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	keep, _ := mixedSpecs()
	good := func(link uint32, data []byte) []byte {
		return pcapFile(binary.LittleEndian, true, link, 0, []record{{at: t0, data: data}})
	}
	tcp := keep[0].ipv4()
	udp := keep[4].ipv4()
	valid := good(LinkRaw, tcp)
	mutate := func(b []byte, f func([]byte)) []byte {
		c := append([]byte(nil), b...)
		f(c)
		return c
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"short file header", valid[:fileHeaderLen-1], ErrTruncated},
		{"bad magic", mutate(valid, func(b []byte) { b[0] ^= 0xff }), ErrBadMagic},
		{"pcapng", mutate(valid, func(b []byte) { binary.LittleEndian.PutUint32(b, 0x0a0d0d0a) }), ErrBadMagic},
		{"link type 105 (802.11)", mutate(valid, func(b []byte) { binary.LittleEndian.PutUint32(b[linkTypeOffset:], 105) }), ErrBadLinkType},
		{"short record header", valid[:fileHeaderLen+recordHeaderLen-3], ErrTruncated},
		{"short record data", valid[:len(valid)-1], ErrTruncated},
		{"huge captured length", mutate(valid, func(b []byte) {
			binary.LittleEndian.PutUint32(b[fileHeaderLen+8:], maxRecordLen+1)
			binary.LittleEndian.PutUint32(b[fileHeaderLen+12:], maxRecordLen+1)
		}), ErrBadRecord},
		{"original < captured", mutate(valid, func(b []byte) { binary.LittleEndian.PutUint32(b[fileHeaderLen+12:], 1) }), ErrBadRecord},
		{"nanoseconds overflow", mutate(valid, func(b []byte) { binary.LittleEndian.PutUint32(b[fileHeaderLen+4:], 1e9) }), ErrBadRecord},
		{"microseconds overflow", mutate(pcapFile(binary.BigEndian, false, LinkRaw, 0, []record{{at: t0, data: tcp}}),
			func(b []byte) { binary.BigEndian.PutUint32(b[fileHeaderLen+4:], 1e6) }), ErrBadRecord},
		{"IHL 4", good(LinkRaw, mutate(tcp, func(b []byte) { b[0] = 0x44 })), ErrBadPacket},
		{"total length < IHL", good(LinkRaw, mutate(tcp, func(b []byte) { binary.BigEndian.PutUint16(b[2:], 10) })), ErrBadPacket},
		{"IPv6 in an IPv4 link", good(LinkIPv4, mutate(tcp, func(b []byte) { b[0] = 0x65 })), ErrBadPacket},
		{"runt IPv4", good(LinkIPv4, tcp[:12]), ErrBadPacket},
		{"runt Ethernet", good(LinkEthernet, []byte{1, 2, 3}), ErrBadPacket},
		{"runt cooked", good(LinkLinuxSLL, []byte{1, 2, 3}), ErrBadPacket},
		{"runt cooked v2", good(LinkSLL2, []byte{1, 2, 3}), ErrBadPacket},
		{"truncated VLAN tag", good(LinkEthernet, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x81, 0, 1}), ErrBadPacket},
		{"TCP header cut", good(LinkRaw, tcp[:ipv4hdr.MinHeaderLen+10]), ErrBadPacket},
		{"TCP data offset 4", good(LinkRaw, mutate(tcp, func(b []byte) { b[ipv4hdr.MinHeaderLen+tcpDataOffOffset] = 0x40 })), ErrBadPacket},
		{"TCP data offset past the end", good(LinkRaw, mutate(tcp, func(b []byte) { b[ipv4hdr.MinHeaderLen+tcpDataOffOffset] = 0xf0 })), ErrBadPacket},
		{"UDP header cut", good(LinkRaw, udp[:ipv4hdr.MinHeaderLen+4]), ErrBadPacket},
		{"UDP total length short", good(LinkRaw, mutate(udp, func(b []byte) { binary.BigEndian.PutUint16(b[2:], ipv4hdr.MinHeaderLen+4) })), ErrBadPacket},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pkts, err := Parse(bytes.NewReader(c.in))
			if !errors.Is(err, c.want) {
				t.Fatalf("Parse = %d packets, %v; want %v", len(pkts), err, c.want)
			}
		})
	}
	// The untouched file parses: the errors above come from the mutations.
	if pkts, err := Parse(bytes.NewReader(valid)); err != nil || len(pkts) != 1 || pkts[0] != keep[0].want(true) {
		t.Fatalf("valid file: %+v, %v", pkts, err)
	}
}

// TestParseLinkTypeFlags: the FCS bits above the 16-bit link type are ignored.
func TestParseLinkTypeFlags(t *testing.T) {
	keep, _ := mixedSpecs()
	f := pcapFile(binary.LittleEndian, false, LinkEthernet|0x14000000, 0, []record{{at: keep[3].at, data: frame(LinkEthernet, etherTypeIPv4, keep[3].ipv4(), 0)}})
	pkts, err := Parse(bytes.NewReader(f))
	if err != nil || len(pkts) != 1 || pkts[0] != keep[3].want(false) {
		t.Fatalf("got %+v, %v", pkts, err)
	}
}

func TestMarkerPacket(t *testing.T) {
	b := markerPacket(4711)
	p, err := decodeIP(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Src != netip.AddrPortFrom(markerSrc, 4711) || p.Dst != markerDst || p.Proto != ProtoUDP || p.Payload != len(markerPayload) {
		t.Fatalf("marker decodes as %+v", p)
	}
	if ipv4hdr.Checksum(b[:ipv4hdr.MinHeaderLen]) != 0 { // a valid header sums to 0xffff
		t.Fatalf("bad IPv4 header checksum")
	}
	if !markerSrc.IsLoopback() || !markerDst.Addr().IsLoopback() {
		t.Fatal("the marker must carry loopback addresses (never forwarded)")
	}
}

func TestParseCounters(t *testing.T) {
	var st Stats
	parseCounters([]string{
		"tcpdump: listening on dq-r0, link-type EN10MB (Ethernet), snapshot length 128 bytes",
		"17 packets captured", "1 packet received by filter", "3 packets dropped by kernel", "2 packets dropped by interface",
	}, &st)
	if st.Captured != 17 || st.ReceivedByFilter != 1 || st.DroppedByKernel != 3 || st.DroppedByIface != 2 || st.Dropped() != 5 {
		t.Fatalf("%+v", st)
	}
}

func FuzzParse(f *testing.F) {
	keep, skip := mixedSpecs()
	for _, link := range []uint32{LinkEthernet, LinkRaw, LinkIPv4, LinkLinuxSLL, LinkSLL2} {
		var recs []record
		for i, s := range append(keep, skip...) {
			recs = append(recs, record{at: s.at, data: frame(link, etherTypeIPv4, s.ipv4(), i%2)})
		}
		f.Add(pcapFile(binary.LittleEndian, true, link, SnapLen, recs))
		f.Add(pcapFile(binary.BigEndian, false, link, 0, recs[:2]))
	}
	c6, s6 := netip.MustParseAddrPort("[2001:2::2]:1"), netip.MustParseAddrPort("[2001:2:0:8001::1]:853")
	for _, link := range []uint32{LinkEthernet, LinkRaw, LinkSLL2} {
		f.Add(pcapFile(binary.LittleEndian, true, link, SnapLen, []record{
			{at: t0, data: frame(link, etherTypeIPv6, ipv6Packet(c6, s6, ProtoUDP, 0, 40), 0)},
			{at: t0, data: frame(link, etherTypeIPv6, ipv6Packet(s6, c6, ProtoTCP, TCPSyn|TCPAck, 3), 0)}}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pkts, err := Parse(bytes.NewReader(data))
		for _, p := range pkts {
			if p.Proto != ProtoTCP && p.Proto != ProtoUDP {
				t.Fatalf("protocol %d returned", p.Proto)
			}
			if p.Payload < 0 || p.Payload > 65535 {
				t.Fatalf("payload %d", p.Payload)
			}
			if !p.Src.Addr().IsValid() || p.Src.Addr().Is4() != p.Dst.Addr().Is4() {
				t.Fatalf("endpoints of no or mixed families %v %v", p.Src, p.Dst)
			}
			if p.Proto == ProtoUDP && (p.TCPFlags != 0 || p.Seq != 0 || p.Ack != 0) {
				t.Fatalf("UDP packet with TCP fields: %+v", p)
			}
		}
		// Deterministic: the same bytes give the same result.
		again, err2 := Parse(bytes.NewReader(data))
		if (err == nil) != (err2 == nil) || len(again) != len(pkts) {
			t.Fatalf("nondeterministic: %d/%v vs %d/%v", len(pkts), err, len(again), err2)
		}
	})
}

// BenchmarkParse decodes a 100,000-packet Ethernet capture (TCP and UDP, snaplen 1600,
// what ForVantage writes) and reports packets per second: the reader must keep up with
// tcpdump at the testbed's rates (the delay line tops out near 50,000 packets/s).
func BenchmarkParse(b *testing.B) {
	keep, _ := mixedSpecs()
	const n = 100000
	recs := make([]record, 0, n)
	for i := range n {
		s := keep[i%len(keep)]
		s.at = t0.Add(time.Duration(i) * 20 * time.Microsecond)
		recs = append(recs, record{at: s.at, data: frame(LinkEthernet, etherTypeIPv4, s.ipv4(), 0)})
	}
	file := pcapFile(binary.LittleEndian, true, LinkEthernet, SnapLen, recs)
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		pkts, err := Parse(bytes.NewReader(file))
		if err != nil || len(pkts) != n {
			b.Fatalf("%d packets, %v", len(pkts), err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "packets/s")
}

// BenchmarkIndex indexes 100,000 packets of 1,000 flows and runs one Exchange per flow.
func BenchmarkIndex(b *testing.B) {
	const flows, per = 1000, 100
	pkts := make([]Packet, 0, flows*per)
	for f := range flows {
		local := netip.AddrPortFrom(client.Addr(), uint16(20000+f))
		for i := range per / 2 {
			at := t0.Add(time.Duration(i)*time.Millisecond + time.Duration(f)*time.Microsecond)
			pkts = append(pkts,
				Packet{At: at, Src: local, Dst: server, Proto: ProtoUDP, Payload: 40},
				Packet{At: at.Add(500 * time.Microsecond), Src: server, Dst: local, Proto: ProtoUDP, Payload: 60})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		ix := NewIndex(pkts)
		for f := range flows {
			local := netip.AddrPortFrom(client.Addr(), uint16(20000+f))
			from := t0.Add(10*time.Millisecond + time.Duration(f)*time.Microsecond)
			if _, _, ok := ix.Exchange(local, server, ProtoUDP, from, from.Add(time.Millisecond)); !ok {
				b.Fatal("no span")
			}
		}
	}
	b.ReportMetric(float64(len(pkts))*float64(b.N)/b.Elapsed().Seconds(), "packets/s")
}

// ipv6Packet builds an IPv6 datagram from src to dst with a hop-by-hop options header
// before a UDP header (or a bare TCP header with flags) and payload bytes of data.
func ipv6Packet(src, dst netip.AddrPort, proto uint8, flags uint8, payload int) []byte {
	hbh := []byte{proto, 0, 1, 4, 0, 0, 0, 0} // Next Header, length 0 (8 bytes), PadN
	th := make([]byte, udpHeaderLen)
	if proto == ProtoTCP {
		th = make([]byte, tcpMinHeaderLen)
		th[tcpDataOffOffset] = (tcpMinHeaderLen / 4) << 4
		th[tcpFlagsOffset] = flags
		binary.BigEndian.PutUint32(th[tcpSeqOffset:], 77)
	}
	binary.BigEndian.PutUint16(th[0:], src.Port())
	binary.BigEndian.PutUint16(th[2:], dst.Port())
	body := append(append(hbh, th...), make([]byte, payload)...)
	b := make([]byte, 40, 40+len(body))
	b[0] = 6 << 4
	binary.BigEndian.PutUint16(b[4:], uint16(len(body)))
	b[6], b[7] = 0, 64 // hop-by-hop first
	s, d := src.Addr().As16(), dst.Addr().As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, body...)
}

// IPv6 TCP and UDP packets decode on every link type that can carry IPv6, extension
// headers walked; an IPv6 packet on an IPv4-only link is an error.
func TestParseIPv6(t *testing.T) {
	c6 := netip.MustParseAddrPort("[2001:2::2]:40001")
	s6 := netip.MustParseAddrPort("[2001:2:0:8001::1]:853")
	udp := ipv6Packet(c6, s6, ProtoUDP, 0, 1200)
	syn := ipv6Packet(c6, s6, ProtoTCP, TCPSyn, 0)
	for _, link := range []uint32{LinkEthernet, LinkRaw, LinkLinuxSLL, LinkSLL2} {
		f := pcapFile(binary.LittleEndian, true, link, 0, []record{
			{at: t0, data: frame(link, etherTypeIPv6, udp, 1)}, {at: t0.Add(time.Millisecond), data: frame(link, etherTypeIPv6, syn, 0)}})
		pkts, err := Parse(bytes.NewReader(f))
		if err != nil || len(pkts) != 2 {
			t.Fatalf("link %d: %+v, %v", link, pkts, err)
		}
		if p := pkts[0]; p.Src != c6 || p.Dst != s6 || p.Proto != ProtoUDP || p.Payload != 1200 {
			t.Errorf("link %d: UDP decodes as %+v", link, p)
		}
		if p := pkts[1]; p.Src != c6 || p.Dst != s6 || p.Proto != ProtoTCP || p.TCPFlags != TCPSyn || p.Seq != 77 || p.Payload != 0 {
			t.Errorf("link %d: TCP decodes as %+v", link, p)
		}
	}
	f := pcapFile(binary.LittleEndian, true, LinkIPv4, 0, []record{{at: t0, data: udp}})
	if _, err := Parse(bytes.NewReader(f)); !errors.Is(err, ErrBadPacket) {
		t.Errorf("IPv6 on an IPv4 link: %v, want ErrBadPacket", err)
	}
}

// TestQUICTypes: a UDP datagram's coalesced QUIC packets are read through the pcap
// path, as far as the snap length lets their headers be walked; a datagram without the
// QUIC fixed bit reads as no QUIC at all. The first long-header packet's SCID and the
// payload's first two bytes (a DNS ID) come along.
func TestQUICTypes(t *testing.T) {
	long := func(typ byte, n int) []byte { // a QUIC v1 long-header packet of n bytes in all
		h := []byte{0xc0 | typ<<4, 0, 0, 0, 1, 0, 4, 1, 2, 3, 4 + typ}
		if typ == 0 { // Initial: an empty token
			h = append(h, 0)
		}
		rest := n - len(h) - 2
		return append(append(h, 0x40|byte(rest>>8), byte(rest)), make([]byte, rest)...)
	}
	initialHS := append(long(0, 150), long(2, 1100)...)
	short := append([]byte{0x40}, make([]byte, 99)...)
	for _, c := range []struct {
		name    string
		payload []byte
		snap    int
		want    []quicwire.Type
		scid    string
	}{
		{"initial+handshake", initialHS, 0, []quicwire.Type{quicwire.Initial, quicwire.Handshake}, "\x01\x02\x03\x04"},
		{"snapped after the second header", initialHS, 28 + 160, []quicwire.Type{quicwire.Initial, quicwire.Handshake}, "\x01\x02\x03\x04"},
		{"snapped inside the first", initialHS, 28 + 100, []quicwire.Type{quicwire.Initial}, "\x01\x02\x03\x04"},
		{"snapped inside the first's SCID", initialHS, 28 + 9, []quicwire.Type{quicwire.Initial}, ""},
		{"handshake+1rtt", append(long(2, 600), short...), 0, []quicwire.Type{quicwire.Handshake, quicwire.Short}, "\x01\x02\x03\x06"},
		{"1rtt", short, 0, []quicwire.Type{quicwire.Short}, ""},
		{"no fixed bit (DNS)", append([]byte{0x12, 0x34}, make([]byte, 38)...), 0, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := spec{at: t0, src: server, dst: client, proto: ProtoUDP, payload: len(c.payload)}
			ip := sp.ipv4()
			copy(ip[len(ip)-len(c.payload):], c.payload)
			pkts, err := Parse(bytes.NewReader(pcapFile(binary.LittleEndian, true, LinkRaw, c.snap, []record{{at: t0, data: ip}})))
			if err != nil || len(pkts) != 1 {
				t.Fatalf("Parse: %d packets, %v", len(pkts), err)
			}
			var want QUICTypes
			for _, typ := range c.want {
				want |= 1 << typ
			}
			if pkts[0].QUIC != want {
				t.Errorf("QUIC types %08b, want %08b", pkts[0].QUIC, want)
			}
			if pkts[0].SCID != c.scid {
				t.Errorf("SCID %x, want %x", pkts[0].SCID, c.scid)
			}
			if lead := uint16(c.payload[0])<<8 | uint16(c.payload[1]); pkts[0].Lead != lead {
				t.Errorf("lead %#04x, want %#04x", pkts[0].Lead, lead)
			}
			for _, typ := range c.want {
				if !pkts[0].QUIC.Has(typ) {
					t.Errorf("Has(%v) false", typ)
				}
			}
		})
	}
}
