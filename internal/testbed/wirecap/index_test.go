package wirecap

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/quicwire"
)

// shuffled returns pkts in a random order (the index must sort by wire time).
func shuffled(pkts []Packet) []Packet {
	out := append([]Packet(nil), pkts...)
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func tcpPkt(at time.Time, src, dst netip.AddrPort, flags uint8, seq, ack uint32, payload int) Packet {
	return Packet{At: at, Src: src, Dst: dst, Proto: ProtoTCP, TCPFlags: flags, Seq: seq, Ack: ack, Payload: payload}
}

func TestTCPHandshake(t *testing.T) {
	local := netip.MustParseAddrPort("198.18.0.2:41000")
	remote := netip.MustParseAddrPort("198.19.7.9:853")
	other := netip.MustParseAddrPort("198.18.0.2:41001")
	const rtt = 20 * time.Millisecond
	rto := time.Second

	// Attempt A: SYN lost once (retransmitted after the RTO), then answered; data flows
	// with pure ACKs interleaved, then FIN.
	aSYN := t0
	aReply := aSYN.Add(rto + rtt)
	// Attempt B reuses the port 5 s later; a stale SYN-ACK of A arrives in between.
	bSYN := t0.Add(5 * time.Second)
	bReply := bSYN.Add(rtt)
	// Attempt C: refused (RST+ACK).
	cSYN := t0.Add(8 * time.Second)
	cReply := cSYN.Add(rtt / 2)
	// Attempt D: never answered.
	dSYN := t0.Add(10 * time.Second)
	// An unrelated flow from another port, at the same time as B.
	oSYN := bSYN.Add(time.Millisecond)
	oReply := oSYN.Add(3 * rtt)

	pkts := []Packet{
		tcpPkt(aSYN, local, remote, TCPSyn, 100, 0, 0),
		tcpPkt(aSYN.Add(rto), local, remote, TCPSyn, 100, 0, 0),
		tcpPkt(aReply, remote, local, TCPSyn|TCPAck, 7000, 101, 0),
		tcpPkt(aReply.Add(10*time.Microsecond), local, remote, TCPAck, 101, 7001, 0),
		tcpPkt(aReply.Add(20*time.Microsecond), local, remote, TCPAck|TCPPsh, 101, 7001, 300),
		tcpPkt(aReply.Add(rtt), remote, local, TCPAck, 7001, 401, 0),
		tcpPkt(aReply.Add(rtt+time.Millisecond), remote, local, TCPAck|TCPPsh, 7001, 401, 900),
		tcpPkt(aReply.Add(rtt+2*time.Millisecond), local, remote, TCPAck|TCPFin, 401, 7901, 0),
		tcpPkt(aReply.Add(2*rtt), remote, local, TCPAck|TCPFin, 7901, 402, 0),

		tcpPkt(bSYN, local, remote, TCPSyn, 900, 0, 0),
		tcpPkt(bSYN.Add(rtt/4), remote, local, TCPSyn|TCPAck, 7000, 101, 0), // stale: acknowledges A
		tcpPkt(bReply, remote, local, TCPSyn|TCPAck, 8000, 901, 0),
		tcpPkt(bReply.Add(5*time.Microsecond), local, remote, TCPAck, 901, 8001, 0),

		tcpPkt(cSYN, local, remote, TCPSyn, 1500, 0, 0),
		tcpPkt(cReply, remote, local, TCPRst|TCPAck, 0, 1501, 0),

		tcpPkt(dSYN, local, remote, TCPSyn, 2500, 0, 0),

		tcpPkt(oSYN, other, remote, TCPSyn, 4242, 0, 0),
		tcpPkt(oReply, remote, other, TCPSyn|TCPAck, 9000, 4243, 0),
	}
	ix := NewIndex(shuffled(pkts))

	cases := []struct {
		name      string
		local     netip.AddrPort
		near      time.Time
		ok        bool
		syn, repl time.Time
		syns      int
		reset     bool
	}{
		{"retransmitted SYN: from the first SYN", local, aSYN.Add(3 * time.Millisecond), true, aSYN, aReply, 2, false},
		{"reused port, stale SYN-ACK ignored", local, bSYN.Add(-2 * time.Millisecond), true, bSYN, bReply, 1, false},
		{"refused", local, cSYN, true, cSYN, cReply, 1, true},
		{"unanswered", local, dSYN.Add(time.Second), false, dSYN, time.Time{}, 1, false},
		{"the other flow", other, bSYN, true, oSYN, oReply, 1, false},
		{"no such flow", netip.MustParseAddrPort("198.18.0.2:1"), bSYN, false, time.Time{}, time.Time{}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, ok := ix.Handshake(c.local, remote, c.near)
			if ok != c.ok || !h.SYN.Equal(c.syn) || !h.Reply.Equal(c.repl) || h.SYNs != c.syns || h.Reset != c.reset {
				t.Fatalf("Handshake = %+v, %v; want SYN %v reply %v SYNs %d reset %v ok %v",
					h, ok, c.syn, c.repl, c.syns, c.reset, c.ok)
			}
			d, ok := ix.TCPHandshake(c.local, remote, c.near)
			if ok != c.ok || (ok && d != c.repl.Sub(c.syn)) {
				t.Fatalf("TCPHandshake = %v, %v; want %v", d, ok, c.repl.Sub(c.syn))
			}
		})
	}
	if ix.Flows() != 2 {
		t.Errorf("%d flows, want 2", ix.Flows())
	}
}

func TestExchange(t *testing.T) {
	local := netip.MustParseAddrPort("198.18.0.2:50000")
	remote := netip.MustParseAddrPort("198.19.3.2:53")
	const rtt = 30 * time.Millisecond
	const sendLag = 40 * time.Microsecond // client stamp -> wire
	const recvLag = 8 * time.Microsecond  // wire -> client's kernel stamp

	// UDP: three exchanges on one socket (port reused across exchanges).
	var udp []Packet
	type ex struct{ from, to, start, end time.Time }
	var exs []ex
	for i := range 3 {
		from := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		start := from.Add(sendLag)
		end := start.Add(rtt)
		udp = append(udp,
			Packet{At: start, Src: local, Dst: remote, Proto: ProtoUDP, Payload: 40},
			Packet{At: end, Src: remote, Dst: local, Proto: ProtoUDP, Payload: 56})
		exs = append(exs, ex{from, end.Add(recvLag), start, end})
	}
	// A client clock that runs a little behind the capture's: the wire time precedes
	// the stamp by less than the slack.
	early := t0.Add(time.Second)
	udp = append(udp,
		Packet{At: early.Add(-ExchangeSlack / 2), Src: local, Dst: remote, Proto: ProtoUDP, Payload: 40},
		Packet{At: early.Add(rtt), Src: remote, Dst: local, Proto: ProtoUDP, Payload: 56})
	exs = append(exs, ex{early, early.Add(rtt + recvLag), early.Add(-ExchangeSlack / 2), early.Add(rtt)})

	// Back-to-back exchanges closer together than the slack (loopback-fast): each must
	// find its own query, not the previous one.
	for i := range 4 {
		from := t0.Add(2*time.Second + time.Duration(i)*ExchangeSlack/4)
		start := from.Add(sendLag)
		end := start.Add(ExchangeSlack / 8)
		udp = append(udp,
			Packet{At: start, Src: local, Dst: remote, Proto: ProtoUDP, Payload: 40},
			Packet{At: end, Src: remote, Dst: local, Proto: ProtoUDP, Payload: 56})
		exs = append(exs, ex{from, end.Add(recvLag), start, end})
	}

	ix := NewIndex(shuffled(udp))
	for i, e := range exs {
		s, en, ok := ix.Exchange(local, remote, ProtoUDP, e.from, e.to)
		if !ok || !s.Equal(e.start) || !en.Equal(e.end) {
			t.Errorf("UDP exchange %d: %v..%v %v; want %v..%v", i, s, en, ok, e.start, e.end)
		}
	}
	// The reply of exchange 0 is not yet on the wire 1 ms before it came.
	if _, _, ok := ix.Exchange(local, remote, ProtoUDP, exs[0].from, exs[0].end.Add(-time.Millisecond)); ok {
		t.Error("exchange ending before its reply: ok")
	}
	// Wrong protocol, wrong peer: nothing.
	if _, _, ok := ix.Exchange(local, remote, ProtoTCP, exs[0].from, exs[0].to); ok {
		t.Error("TCP lookup of a UDP flow: ok")
	}
	// A window after every packet: no start.
	last := exs[len(exs)-1]
	if _, _, ok := ix.Exchange(local, remote, ProtoUDP, last.to.Add(time.Second), last.to.Add(2*time.Second)); ok {
		t.Error("empty window: ok")
	}

	// TCP: the query in two segments, pure ACKs both ways, the answer in two segments,
	// then a FIN after the client's stamp.
	from := t0.Add(2 * time.Second)
	q1 := from.Add(sendLag)
	a1 := q1.Add(rtt)
	a2 := a1.Add(200 * time.Microsecond)
	to := a2.Add(recvLag)
	tcp := []Packet{
		tcpPkt(from.Add(-rtt), local, remote, TCPSyn, 1, 0, 0),
		tcpPkt(from.Add(-time.Microsecond), remote, local, TCPSyn|TCPAck, 9, 2, 0),
		tcpPkt(from.Add(-time.Microsecond/2), local, remote, TCPAck, 2, 10, 0), // pure ACK, before the query
		tcpPkt(q1, local, remote, TCPAck|TCPPsh, 2, 10, 2),
		tcpPkt(q1.Add(time.Microsecond), local, remote, TCPAck|TCPPsh, 4, 10, 40),
		tcpPkt(q1.Add(rtt/2), remote, local, TCPAck, 10, 44, 0), // pure ACK
		tcpPkt(a1, remote, local, TCPAck, 10, 44, 1448),
		tcpPkt(a1.Add(time.Microsecond), local, remote, TCPAck, 44, 1458, 0),
		tcpPkt(a2, remote, local, TCPAck|TCPPsh, 1458, 44, 300),
		tcpPkt(a2.Add(2*time.Microsecond), remote, local, TCPAck, 1758, 44, 0), // pure ACK before to
		tcpPkt(to.Add(time.Millisecond), remote, local, TCPAck|TCPFin|TCPPsh, 1758, 44, 20),
	}
	ix = NewIndex(shuffled(tcp))
	s, en, ok := ix.Exchange(local, remote, ProtoTCP, from, to)
	if !ok || !s.Equal(q1) || !en.Equal(a2) {
		t.Fatalf("TCP exchange: %v..%v %v; want %v..%v", s, en, ok, q1, a2)
	}
	if got := to.Sub(from) - en.Sub(s); got != sendLag+recvLag {
		t.Fatalf("client - wire = %v, want %v", got, sendLag+recvLag)
	}
	// The same flow as a session set-up (SYN .. last answer segment before to).
	if s, en, ok := ix.TCPSetup(local, remote, from, to); !ok || !s.Equal(from.Add(-rtt)) || !en.Equal(a2) {
		t.Fatalf("TCPSetup: %v..%v %v; want %v..%v", s, en, ok, from.Add(-rtt), a2)
	}
	if _, _, ok := ix.TCPSetup(local, remote, from, from.Add(-time.Microsecond)); ok {
		t.Error("TCPSetup ending before any server payload: ok")
	}
	// Ending before the first answer segment: the only server data is earlier than the
	// query -> none -> not ok.
	if _, _, ok := ix.Exchange(local, remote, ProtoTCP, from, a1.Add(-time.Microsecond)); ok {
		t.Error("exchange without an answer: ok")
	}
}

// TestAcross: a QUIC-like exchange seen at the vantage's link and, shifted by the
// one-way delay, at the server's: each payload packet is found at the other point by its
// ordinal; pure ACKs, other flows and size mismatches do not confuse it.
func TestAcross(t *testing.T) {
	client := netip.MustParseAddrPort("198.18.0.2:50000")
	server := netip.MustParseAddrPort("198.19.3.4:853")
	other := netip.MustParseAddrPort("198.18.0.2:50001")
	const oneWay = 10 * time.Millisecond
	udp := func(at time.Time, src, dst netip.AddrPort, n int) Packet {
		return Packet{At: at, Src: src, Dst: dst, Proto: ProtoUDP, Payload: n}
	}
	// At the server's point: Initial in at t0; flight out at t0+0.6 ms (3 datagrams,
	// 10 µs apart); HANDSHAKE_DONE at t0+2*oneWay+1 ms after the client's Finished.
	srvIn := t0.Add(oneWay)
	var vant, inet []Packet
	add := func(at time.Time, src, dst netip.AddrPort, n int) {
		if src == client || src == other {
			vant = append(vant, udp(at, src, dst, n))
			inet = append(inet, udp(at.Add(oneWay), src, dst, n))
		} else {
			inet = append(inet, udp(at, src, dst, n))
			vant = append(vant, udp(at.Add(oneWay), src, dst, n))
		}
	}
	add(t0, client, server, 1200)
	add(t0.Add(time.Millisecond), other, server, 1200) // another client's flow
	for i := range 3 {
		add(srvIn.Add(600*time.Microsecond+time.Duration(i)*10*time.Microsecond), server, client, 1200+i)
	}
	add(srvIn.Add(2*oneWay+700*time.Microsecond), client, server, 90) // client Finished (wire time at the vantage)
	add(srvIn.Add(4*oneWay), server, client, 40)                      // HANDSHAKE_DONE
	vix, iix := NewIndex(shuffled(vant)), NewIndex(shuffled(inet))

	last := srvIn.Add(620 * time.Microsecond).Add(oneWay) // the flight's third datagram at the vantage
	got, ok := vix.Across(iix, server, client, ProtoUDP, last)
	if want := srvIn.Add(620 * time.Microsecond); !ok || !got.Equal(want) {
		t.Fatalf("flight's last datagram at the server: %v %v, want %v", got, ok, want)
	}
	got, ok = vix.Across(iix, client, server, ProtoUDP, t0)
	if !ok || !got.Equal(srvIn) {
		t.Fatalf("Initial at the server: %v %v, want %v", got, ok, srvIn)
	}
	// The server's span of the handshake, as the benchmarks take it: Initial in to last
	// flight datagram out.
	if d := srvIn.Add(620 * time.Microsecond).Sub(srvIn); d != 620*time.Microsecond {
		t.Fatalf("server span %v", d)
	}
	// A time no packet of the flow has before it.
	if _, ok := vix.Across(iix, server, client, ProtoUDP, t0); ok {
		t.Fatal("found a server packet before the first one")
	}
	// A capture that lost the packet (the other index has only two flight datagrams).
	short := NewIndex(inet[:4])
	if _, ok := vix.Across(short, server, client, ProtoUDP, last); ok {
		t.Fatal("matched a packet the other capture does not have")
	}
	// Sizes differ: not the same packet.
	bad := append([]Packet(nil), inet...)
	for i := range bad {
		if bad[i].Src == server && bad[i].Payload == 1202 {
			bad[i].Payload = 999
		}
	}
	if _, ok := vix.Across(NewIndex(bad), server, client, ProtoUDP, last); ok {
		t.Fatal("matched a packet of another size")
	}
}

// TestTurns: a Retry-like exchange at one link: the gaps ending in a server packet are
// the server's turns, those ending in a client packet the client's; packets outside the
// span and pure TCP ACKs do not count.
func TestTurns(t *testing.T) {
	c := netip.MustParseAddrPort("198.18.0.2:40000")
	s := netip.MustParseAddrPort("198.19.0.9:853")
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	udp := func(at time.Time, src, dst netip.AddrPort) Packet {
		return Packet{At: at, Src: src, Dst: dst, Proto: ProtoUDP, Payload: 100}
	}
	pkts := []Packet{
		udp(ms(0), c, s),   // Initial
		udp(ms(0.3), s, c), // Retry: server turn 0.3
		udp(ms(0.5), c, s), // Initial with token: client turn 0.2
		udp(ms(1.5), s, c), // flight: server turn 1.0
		udp(ms(1.6), s, c), // flight: server turn 0.1
		udp(ms(9), c, s),   // after the span
		udp(ms(-1), s, c),  // before it
		{At: ms(1.55), Src: c, Dst: s, Proto: ProtoTCP, TCPFlags: TCPAck}, // another protocol
	}
	ix := NewIndex(shuffled(pkts))
	srv, cli := ix.Turns(c, s, ProtoUDP, ms(0), ms(1.6))
	if srv != 1400*time.Microsecond || cli != 200*time.Microsecond {
		t.Fatalf("turns: server %v client %v, want 1.4ms 200µs", srv, cli)
	}
	// TCP: a pure ACK from the client inside the server's flight is not a turn.
	tcp := []Packet{
		tcpPkt(ms(0), c, s, TCPAck|TCPPsh, 1, 1, 300),
		tcpPkt(ms(0.2), c, s, TCPAck, 301, 1, 0),
		tcpPkt(ms(0.7), s, c, TCPAck|TCPPsh, 1, 301, 900),
	}
	srv, cli = NewIndex(tcp).Turns(c, s, ProtoTCP, ms(0), ms(1))
	if srv != 700*time.Microsecond || cli != 0 {
		t.Fatalf("tcp turns: server %v client %v, want 700µs 0", srv, cli)
	}
}

// TestAcrossTCPSegmentation: the server's 4,344-byte flight leaves its host as one GSO
// super-segment and reaches the client's link as three MSS-sized segments; each
// segment at the client's link is found in the super-segment by its last byte, and the
// client's query (one segment at both points) likewise. A retransmitted earlier segment
// does not match a later byte.
func TestAcrossTCPSegmentation(t *testing.T) {
	c := netip.MustParseAddrPort("198.18.0.2:40000")
	s := netip.MustParseAddrPort("198.19.0.9:443")
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	const seq0 = 0xfffff000 // wraps around 2^32 inside the flight
	inet := []Packet{
		tcpPkt(ms(10), c, s, TCPAck|TCPPsh, 5, 1, 300),
		tcpPkt(ms(10.5), s, c, TCPAck|TCPPsh, seq0, 305, 4344),
		tcpPkt(ms(11), s, c, TCPAck|TCPPsh, seq0, 305, 1448), // a retransmission of the first part
	}
	vant := []Packet{
		tcpPkt(ms(0), c, s, TCPAck|TCPPsh, 5, 1, 300),
		tcpPkt(ms(20.5), s, c, TCPAck, seq0, 305, 1448),
		tcpPkt(ms(20.51), s, c, TCPAck, seq0+1448, 305, 1448),
		tcpPkt(ms(20.52), s, c, TCPAck|TCPPsh, seq0+2896, 305, 1448),
	}
	vix, iix := NewIndex(vant), NewIndex(inet)
	for _, at := range []time.Time{ms(20.5), ms(20.51), ms(20.52)} {
		if got, ok := vix.Across(iix, s, c, ProtoTCP, at); !ok || !got.Equal(ms(10.5)) {
			t.Fatalf("segment at %v: %v %v, want the super-segment at %v", at, got, ok, ms(10.5))
		}
	}
	if got, ok := vix.Across(iix, c, s, ProtoTCP, ms(0)); !ok || !got.Equal(ms(10)) {
		t.Fatalf("query: %v %v", got, ok)
	}
	// The other way round: the super-segment's last byte is in the third segment.
	if got, ok := iix.Across(vix, s, c, ProtoTCP, ms(10.5)); !ok || !got.Equal(ms(20.52)) {
		t.Fatalf("super-segment at the client's link: %v %v", got, ok)
	}
	// A byte the other capture never saw.
	if _, ok := vix.Across(NewIndex(inet[:1]), s, c, ProtoTCP, ms(20.5)); ok {
		t.Fatal("matched a segment the other capture does not have")
	}
}

// TestQUICHandshake: the handshake ends at the server's last datagram with Handshake
// packets up to its first with a 1-RTT packet, whatever follows (0.5-RTT data, an
// answer, a retransmitted Handshake packet), and starts at the client's first Initial.
func TestQUICHandshake(t *testing.T) {
	local := netip.MustParseAddrPort("198.18.0.2:40000")
	remote := netip.MustParseAddrPort("198.19.1.2:853")
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	types := func(ts ...quicwire.Type) QUICTypes {
		var q QUICTypes
		for _, x := range ts {
			q |= 1 << x
		}
		return q
	}
	c2s := func(us int, ts ...quicwire.Type) Packet {
		return Packet{At: at(us), Src: local, Dst: remote, Proto: ProtoUDP, Payload: 1200, QUIC: types(ts...)}
	}
	s2c := func(us int, ts ...quicwire.Type) Packet {
		return Packet{At: at(us), Src: remote, Dst: local, Proto: ProtoUDP, Payload: 1200, QUIC: types(ts...)}
	}
	I, H, S, Z := quicwire.Initial, quicwire.Handshake, quicwire.Short, quicwire.ZeroRTT
	for _, c := range []struct {
		name  string
		pkts  []Packet
		from  int
		start int
		end   int
		ok    bool
	}{
		{"flight, 0.5-RTT datagram, retransmission", []Packet{
			c2s(100, I), s2c(10100, I, H), c2s(10110, I), s2c(10120, H), s2c(10130, S), c2s(10200, H, S), s2c(30000, H)},
			90, 100, 10120, true},
		{"coalesced 1-RTT ends it", []Packet{
			c2s(100, I), s2c(10100, I), s2c(10110, H, S), s2c(10120, S)}, 100, 100, 10110, true},
		{"0-RTT: the answer follows", []Packet{
			c2s(100, I, Z), s2c(10100, I, H, S), s2c(10105, S)}, 100, 100, 10100, true},
		{"Retry: the second Initial's flight", []Packet{
			c2s(100, I), s2c(10100, quicwire.Retry), c2s(10110, I), s2c(20100, I, H), s2c(20110, S)}, 100, 100, 20100, true},
		{"an earlier connection's packets are not it", []Packet{
			s2c(50, H), c2s(100, I), s2c(10100, I)}, 100, 100, 0, false},
		{"no Initial", []Packet{s2c(10100, I, H)}, 100, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := NewIndex(c.pkts)
			start, end, ok := ix.QUICHandshake(local, remote, at(c.from))
			if ok != c.ok || (ok && (!start.Equal(at(c.start)) || !end.Equal(at(c.end)))) {
				t.Errorf("QUICHandshake = %v, %v, %v; want %v, %v, %v", start.Sub(t0), end.Sub(t0), ok,
					at(c.start).Sub(t0), at(c.end).Sub(t0), c.ok)
			}
		})
	}
}
