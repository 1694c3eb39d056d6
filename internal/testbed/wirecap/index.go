package wirecap

import (
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/doqscan/doqscan/internal/quicwire"
)

// ExchangeSlack is how far before the client's own send stamp a packet may carry its
// wire time and still start the exchange. The client stamps just before its send
// syscall, so its packet reaches the wire shortly after; the slack covers clock
// granularity and the capture's timestamping (taken from the same CLOCK_REALTIME).
const ExchangeSlack = time.Millisecond

// flowKey is one flow: the unordered pair of endpoints (lo < hi) and the protocol.
type flowKey struct {
	lo, hi netip.AddrPort
	proto  uint8
}

func keyOf(a, b netip.AddrPort, proto uint8) flowKey {
	if b.Compare(a) < 0 {
		a, b = b, a
	}
	return flowKey{a, b, proto}
}

// Index groups a capture's packets by flow, each flow sorted by wire time.
type Index struct {
	flows map[flowKey][]Packet
}

// NewIndex indexes pkts (not retained: the index holds its own copy).
func NewIndex(pkts []Packet) *Index {
	ix := &Index{flows: make(map[flowKey][]Packet)}
	for _, p := range pkts {
		k := keyOf(p.Src, p.Dst, p.Proto)
		ix.flows[k] = append(ix.flows[k], p)
	}
	for _, f := range ix.flows {
		slices.SortStableFunc(f, func(a, b Packet) int { return a.At.Compare(b.At) })
	}
	return ix
}

// Flows returns the number of flows.
func (ix *Index) Flows() int { return len(ix.flows) }

// Flow returns the packets between a and b (both directions) of proto, by wire time.
// The slice belongs to the index.
func (ix *Index) Flow(a, b netip.AddrPort, proto uint8) []Packet {
	return ix.flows[keyOf(a, b, proto)]
}

// Handshake is one TCP connection attempt on the wire, seen from the client.
type Handshake struct {
	SYN     time.Time // the attempt's first SYN
	LastSYN time.Time // its last (re)transmission before the reply
	Reply   time.Time // the server's SYN-ACK or RST; zero when none was captured
	SYNs    int       // SYNs sent (1: no retransmission)
	Reset   bool      // the reply was a RST
}

// Duration is the wire time from the first SYN to the reply (what a client's connect()
// took on the wire).
func (h Handshake) Duration() time.Duration { return h.Reply.Sub(h.SYN) }

// Handshake returns the connection attempt from local (the client) to remote whose
// first SYN is closest to near. An attempt is a client SYN (SYN set, ACK not) and its
// retransmissions (same sequence number); its reply is the first SYN-ACK or RST from
// remote acknowledging that sequence number (a RST without ACK answers the open attempt).
// ok is false when no attempt was captured or the chosen one got no reply.
func (ix *Index) Handshake(local, remote netip.AddrPort, near time.Time) (Handshake, bool) {
	type attempt struct {
		Handshake
		seq uint32
	}
	var atts []attempt
	for _, p := range ix.Flow(local, remote, ProtoTCP) {
		switch {
		case p.Src == local && p.Dst == remote && p.TCPFlags&(TCPSyn|TCPAck|TCPRst) == TCPSyn:
			if n := len(atts); n > 0 && atts[n-1].seq == p.Seq && atts[n-1].Reply.IsZero() {
				atts[n-1].SYNs++
				atts[n-1].LastSYN = p.At
				continue
			}
			atts = append(atts, attempt{Handshake{SYN: p.At, LastSYN: p.At, SYNs: 1}, p.Seq})
		case p.Src == remote && p.Dst == local:
			synAck := p.TCPFlags&(TCPSyn|TCPAck) == TCPSyn|TCPAck
			rst := p.TCPFlags&TCPRst != 0
			if !synAck && !rst {
				continue
			}
			for i := len(atts) - 1; i >= 0; i-- {
				a := &atts[i]
				if !a.Reply.IsZero() {
					break // replies come in order; an answered attempt closes the older ones
				}
				if p.TCPFlags&TCPAck != 0 && p.Ack != a.seq+1 {
					continue
				}
				a.Reply, a.Reset = p.At, rst && !synAck
				break
			}
		}
	}
	if len(atts) == 0 {
		return Handshake{}, false
	}
	best := 0
	for i := range atts {
		if absDur(atts[i].SYN.Sub(near)) < absDur(atts[best].SYN.Sub(near)) {
			best = i
		}
	}
	h := atts[best].Handshake
	return h, !h.Reply.IsZero()
}

// TCPHandshake is the wire time from the client's SYN to the server's SYN-ACK (or RST)
// of the attempt from local to remote whose SYN is closest to near (see Handshake).
func (ix *Index) TCPHandshake(local, remote netip.AddrPort, near time.Time) (time.Duration, bool) {
	h, ok := ix.Handshake(local, remote, near)
	if !ok {
		return 0, false
	}
	return h.Duration(), true
}

// Exchange returns the wire span of one exchange between local (the client) and remote
// over proto that the client timed from `from` (stamped just before its first send
// syscall) to `to` (the kernel receive time of the packet that ended it):
//
//   - start: the first local->remote packet carrying payload (TCP payload > 0, any UDP
//     datagram) on the wire at or after from (and at or before to); failing that, the
//     last one within ExchangeSlack before from (a client clock a little behind);
//   - end: the last remote->local packet carrying payload on the wire at or before to
//     (the same packet crossed the capture point a few µs before the client's kernel
//     stamped it; when the server's packets come in a burst tighter than that, end can
//     be a later packet of the same burst, off by at most those few µs).
//
// ok is false when either is missing or end is before start.
func (ix *Index) Exchange(local, remote netip.AddrPort, proto uint8, from, to time.Time) (start, end time.Time, ok bool) {
	f := ix.Flow(local, remote, proto)
	sent := func(p Packet) bool { return p.Src == local && p.Dst == remote && carries(p) }
	// The first client packet at or after from, unless it comes after to: then the last
	// one within the slack before from. (Taking the first after from - slack outright
	// would pick the previous exchange's packet when exchanges on one flow follow each
	// other within the slack, as on loopback.)
	i := sort.Search(len(f), func(i int) bool { return !f[i].At.Before(from) })
	for k := i; k < len(f) && !f[k].At.After(to); k++ {
		if sent(f[k]) {
			start, ok = f[k].At, true
			break
		}
	}
	for k := i - 1; !ok && k >= 0 && !f[k].At.Before(from.Add(-ExchangeSlack)); k-- {
		if sent(f[k]) {
			start, ok = f[k].At, true
		}
	}
	if !ok {
		return time.Time{}, time.Time{}, false
	}
	j := sort.Search(len(f), func(i int) bool { return f[i].At.After(to) })
	for j--; j >= 0; j-- {
		if p := f[j]; p.Src == remote && p.Dst == local && carries(p) {
			end = p.At
			return start, end, !end.Before(start)
		}
	}
	return time.Time{}, time.Time{}, false
}

// QUICHandshake returns the wire span of the QUIC handshake a client at local started
// towards remote at from (stamped just before it sent its first Initial):
//
//   - start: the first local->remote datagram carrying an Initial packet at or after
//     from less ExchangeSlack (a measurement opens a socket, so a flow of its own, per
//     connection);
//   - end: the server datagram that ended its handshake flight, the last remote->local
//     datagram after start carrying a Handshake packet, up to and including the first
//     one carrying a 1-RTT packet (a server sends 1-RTT packets once its flight is out,
//     RFC 9001 §4.1.4, and Handshake packets after that are retransmissions). Read from
//     the packet types alone (Packet.QUIC), not from anything the client reported.
//
// ok is false when either is missing.
func (ix *Index) QUICHandshake(local, remote netip.AddrPort, from time.Time) (start, end time.Time, ok bool) {
	f := ix.Flow(local, remote, ProtoUDP)
	i := sort.Search(len(f), func(i int) bool { return !f[i].At.Before(from.Add(-ExchangeSlack)) })
	for ; i < len(f); i++ {
		if p := f[i]; p.Src == local && p.Dst == remote && p.QUIC.Has(quicwire.Initial) {
			break
		}
	}
	if i == len(f) {
		return time.Time{}, time.Time{}, false
	}
	for _, p := range f[i:] {
		if p.Src != remote || p.Dst != local {
			continue
		}
		if p.QUIC.Has(quicwire.Handshake) {
			end, ok = p.At, true
		}
		if p.QUIC.Has(quicwire.Short) {
			break
		}
	}
	return f[i].At, end, ok
}

// TCPSetup is the wire span of a session set-up over TCP that goes on with an exchange
// (TLS for DoT and DoH, whose handshake time runs from the SYN to the server's last
// handshake flight): start is the first SYN of the attempt from local to remote closest
// to from (see Handshake), end the last remote->local packet carrying payload at or
// before to. ok is false when the attempt got no SYN-ACK or no such packet follows it.
func (ix *Index) TCPSetup(local, remote netip.AddrPort, from, to time.Time) (start, end time.Time, ok bool) {
	h, ok := ix.Handshake(local, remote, from)
	if !ok || h.Reset {
		return time.Time{}, time.Time{}, false
	}
	f := ix.Flow(local, remote, ProtoTCP)
	j := sort.Search(len(f), func(i int) bool { return f[i].At.After(to) })
	for j--; j >= 0 && !f[j].At.Before(h.Reply); j-- {
		if p := f[j]; p.Src == remote && p.Dst == local && carries(p) {
			return h.SYN, p.At, true
		}
	}
	return time.Time{}, time.Time{}, false
}

// carries reports whether p carries application data: a TCP segment with payload, or
// any UDP datagram (an empty datagram is still a message).
func carries(p Packet) bool { return p.Proto == ProtoUDP || p.Payload > 0 }

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// Across returns when the packet that crossed this capture's point at `at`, going from
// src to dst over proto and carrying payload, crossed the point of other (a capture of
// the same flow elsewhere on the path: ForVantage and ForInternet). ok is false when no
// such packet is in either.
//
//   - TCP: the other capture's packet that carries the same last byte (by sequence
//     number). The two points may see different segmentations (a veth hands GSO
//     super-segments to the capture before they are split; the delay line's TUN device
//     forwards them split), so a segment is found inside the bigger one that carried it.
//   - UDP: the packet with the same ordinal among the flow's datagrams in that direction,
//     and the same size (the delay line keeps each flow's order; lossless paths drop
//     nothing).
func (ix *Index) Across(other *Index, src, dst netip.AddrPort, proto uint8, at time.Time) (time.Time, bool) {
	n, size := -1, 0
	var last uint32
	for _, p := range ix.Flow(src, dst, proto) {
		if p.At.After(at) {
			break
		}
		if p.Src == src && p.Dst == dst && carries(p) {
			n++
			size = p.Payload
			last = p.Seq + uint32(p.Payload) - 1
			if p.At.Equal(at) {
				break
			}
		}
	}
	if n < 0 {
		return time.Time{}, false
	}
	for _, p := range other.Flow(src, dst, proto) {
		if p.Src != src || p.Dst != dst || !carries(p) {
			continue
		}
		if proto == ProtoTCP {
			// last - p.Seq < payload, in sequence-number (mod 2^32) arithmetic.
			if last-p.Seq < uint32(p.Payload) {
				return p.At, true
			}
			continue
		}
		if n == 0 {
			return p.At, p.Payload == size
		}
		n--
	}
	return time.Time{}, false
}

// Turns splits the span from..to of the flow between local (the client) and remote
// over proto by whose turn it was: every gap between two consecutive payload-carrying
// packets (see Exchange) inside the span counts for the sender of the later one, which
// was busy producing it while the other side waited. Seen at the server's link, the
// server's turns are its processing (for a multi-flight exchange such as a Retry
// handshake, the sum of its turns); seen at the client's link, the client's turns are
// its own processing in the middle of the exchange (acknowledging, answering a Retry).
func (ix *Index) Turns(local, remote netip.AddrPort, proto uint8, from, to time.Time) (server, client time.Duration) {
	var prev time.Time
	for _, p := range ix.Flow(local, remote, proto) {
		if p.At.Before(from) || !carries(p) {
			continue
		}
		if p.At.After(to) {
			break
		}
		if !prev.IsZero() {
			if p.Src == remote {
				server += p.At.Sub(prev)
			} else {
				client += p.At.Sub(prev)
			}
		}
		prev = p.At
	}
	return server, client
}
