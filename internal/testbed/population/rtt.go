package population

import (
	"net/netip"
	"time"

	"github.com/doqscan/doqscan/internal/hostile"
)

// Protocols and phases of a measurement.
const (
	ProtoDoUDP = "doudp" // DNS over UDP/53
	ProtoDoTCP = "dotcp" // DNS over TCP/53
	ProtoDoT   = "dot"   // DNS over TLS (RFC 7858)
	ProtoDoH   = "doh"   // DNS over HTTPS (RFC 8484) over TCP+TLS 1.3
	ProtoDoQ   = "doq"   // DNS over QUIC (RFC 9250)
	ProtoDoH3  = "doh3"  // DNS over HTTPS over HTTP/3 (RFC 8484 + RFC 9114), on the host's doh3 port

	PhaseWarmup   = "warmup"   // a fresh session: no token, no known version
	PhaseMeasured = "measured" // reuses the warm-up's negotiated version and NEW_TOKEN token
	// PhaseFirstContact is a warm-up from a source address a retry=first server has not
	// sent a Retry to within RetryFirstTTL. PhaseWarmup assumes it has (the steady state
	// of a round: the first DoQ exchange with a resolver leaves the address remembered);
	// for every other server the two phases are the same.
	PhaseFirstContact = "first-contact"
)

// ClientHello describes the client's first flight, which sets the server's
// anti-amplification budget (RFC 9000 §8.1: 3x the bytes received before validation).
type ClientHello struct {
	Name         string
	InitialBytes int // UDP payload bytes of the client's Initial datagrams
	ServerShare  int // bytes of the server's key share that answer it (in the ServerHello)
}

// quic-go pads every Initial datagram to 1280 bytes (protocol.InitialPacketSize).
var (
	// ClientX25519 is a one-Initial ClientHello (CurvePreferences X25519: what 2021 clients sent).
	ClientX25519 = ClientHello{Name: "x25519", InitialBytes: 1280, ServerShare: 32}
	// ClientMLKEM is Go 1.26's default X25519MLKEM768 ClientHello, which spans two Initials.
	ClientMLKEM = ClientHello{Name: "x25519mlkem768", InitialBytes: 2 * 1280, ServerShare: 1120}
)

// Initial sizes a client may pad its Initial datagrams to (quic-go's
// Config.InitialPacketSize): RFC 9000's minimum, a common middle, and the most a
// 1,500-byte Ethernet MTU carries (quic-go's MaxPacketBufferSize).
var InitialSizes = []int{1200, 1350, 1452}

// ClientFor is the first flight of a quic-go client padding its Initials to size with key
// share keyShare ("x25519" or "x25519mlkem768"). The hybrid ClientHello spans two
// Initials at every size up to 1,452 bytes (measured: 2,400, 2,700, 2,904 bytes).
func ClientFor(keyShare string, size int) (ClientHello, bool) {
	switch keyShare {
	case ClientX25519.Name:
		return ClientHello{Name: keyShare, InitialBytes: size, ServerShare: ClientX25519.ServerShare}, true
	case ClientMLKEM.Name:
		return ClientHello{Name: keyShare, InitialBytes: 2 * size, ServerShare: ClientMLKEM.ServerShare}, true
	}
	return ClientHello{}, false
}

// AmplificationFactor is the anti-amplification limit (RFC 9000 §8.1).
const AmplificationFactor = 3

// Approximate sizes used to predict the server's first flight (checked against the real
// chains by internal/testbed/pki's tests).
const (
	approxCertBase     = 420 // an Ed25519 certificate without filler, DER bytes
	approxPadOverhead  = 16  // the filler extension's OID and headers
	approxFlightFixed  = 530 // ServerHello (without key share), EncryptedExtensions, CertificateVerify, Finished, QUIC headers and padding (quic-go, measured)
	approxPerCertFrame = 5   // TLS Certificate entry framing
)

// ApproxChainBytes estimates the DER bytes of the chain the server sends (leaf and
// intermediates; the root is not sent).
func (c Cert) ApproxChainBytes() int {
	per := approxCertBase + approxPerCertFrame
	if c.Pad > 0 {
		per += c.Pad + approxPadOverhead
	}
	return per * (1 + c.Intermediates)
}

// ServerFlightBytes estimates the server's first flight (Initial + Handshake) for client.
func (c Cert) ServerFlightBytes(client ClientHello) int {
	return approxFlightFixed + client.ServerShare + c.ApproxChainBytes()
}

// ServerDatagramBytes is the size of a quic-go server's first-flight datagrams (its
// InitialPacketSize).
const ServerDatagramBytes = 1280

// SendableUnvalidated is how many bytes an unvalidated quic-go server sends before it
// waits for the client: it sends a datagram whenever its bytes sent are below 3x those
// received (RFC 9000 §8.1's limit, checked before each datagram), so it stops at the
// first multiple of its datagram size at or above the budget (3,840 for a 1,200-byte
// Initial, 5,120 for 1,350 and 1,452).
func SendableUnvalidated(client ClientHello) int {
	budget := AmplificationFactor * client.InitialBytes
	return (budget + ServerDatagramBytes - 1) / ServerDatagramBytes * ServerDatagramBytes
}

// ExceedsAmplification reports whether the server's first flight with this certificate
// exceeds what an unvalidated server may send to client (SendableUnvalidated), so it
// stalls for one round trip.
func (c Cert) ExceedsAmplification(client ClientHello) bool {
	return c.ServerFlightBytes(client) > SendableUnvalidated(client)
}

// HandshakeRTTs returns how many round trips the handshake of proto to (addr, port) takes
// in phase, with the client's first flight client (only DoQ depends on it); ok is false
// when the endpoint does not complete a handshake of that protocol (silent, hostile, not
// DoQ, no such service). Lossy paths may add retransmissions on top.
//
//	DoUDP 0; DoTCP 1; DoT and DoH (TCP + TLS 1.3) 2, +1 when the server's TLS flight
//	exceeds TCP's initial congestion window (TCPInitialWindow: slow start waits for the
//	client's ACKs; chain-big with an X25519MLKEM768 share does);
//	DoQ and DoH3 1, +1 for Version Negotiation (warm-up only: the measured connection reuses the
//	version), +1 for Retry (unless a valid token is presented), +1 for an amplification
//	stall (the first flight exceeds 3x the client's bytes and the address is not validated
//	by a Retry or a valid NEW_TOKEN token).
func (p *Population) HandshakeRTTs(addr netip.Addr, port uint16, proto, phase string, client ClientHello) (int, bool) {
	r := p.Lookup(addr)
	if r == nil || (r.Hostile != hostile.None && r.Hostile != hostile.Truncated && r.Hostile != hostile.Endless &&
		r.Hostile != hostile.WrongLength && r.Hostile != hostile.Reset) {
		return 0, false
	}
	switch proto {
	case ProtoDoUDP:
		return 0, port == 53 && r.HasDNS("udp")
	case ProtoDoTCP:
		return 1, port == 53 && r.HasDNS("tcp")
	case ProtoDoT:
		return 2 + p.slowStart(r, client), r.DoT != 0 && port == r.DoT
	case ProtoDoH:
		return 2 + p.slowStart(r, client), r.DoH != 0 && port == r.DoH
	case ProtoDoQ:
		if v := p.ExpectVerify(addr, port); v.ALPN == "" {
			return 0, false
		}
	case ProtoDoH3:
		if r.DoH3 == 0 || port != r.DoH3 || r.Hostile != "" {
			return 0, false
		}
	default:
		return 0, false
	}
	v := p.ExpectVerify(addr, port) // version and VN do not depend on the ALPN
	tokenValid := phase == PhaseMeasured && r.Token == TokenHonour
	n := 1
	if phase != PhaseMeasured && v.NeedsVN {
		n++
	}
	validated := tokenValid
	if r.Retries(proto, phase) && !tokenValid {
		n++
		validated = true // the Retry token validates the address
	}
	if !validated && p.Certs[r.Cert].ExceedsAmplification(client) {
		n++
	}
	return n, true
}

// TCPInitialWindow is the bytes a Linux TCP sender puts on the wire before the first
// ACK: an initial window of 10 segments (RFC 6928 §2) of a 1448-byte MSS (1500-byte MTU
// with the timestamp option). A TLS server flight above it costs one more round trip.
const TCPInitialWindow = 10 * 1448

// slowStart: 1 when the server's TLS 1.3 flight (ServerHello to Finished) over TCP does
// not fit the initial congestion window, else 0. The flight estimate is the QUIC one
// (ServerFlightBytes); the TLS record and TCP framing differ by a few dozen bytes.
func (p *Population) slowStart(r *Record, client ClientHello) int {
	if p.Certs[r.Cert].ServerFlightBytes(client) > TCPInitialWindow {
		return 1
	}
	return 0
}

// ClientInitialPTO is the client's first probe timeout before it has an RTT sample:
// quic-go's initial RTT is 100 ms (RFC 9002 §6.2.2 recommends 333 ms) and the PTO is
// twice it (the qlog's first loss_timer_updated shows 200 ms).
const ClientInitialPTO = 200 * time.Millisecond

// quic-go's pacer (RFC 9002 §7.7): a burst of up to PacerBurstPackets datagrams leaves at
// once; the rest of a flight is paced at 1.25 x cwnd / smoothed RTT, i.e. one datagram
// every PacerInterval with the initial window (32 packets) and the initial RTT (100 ms)
// a server has before its first RTT sample.
const (
	PacerBurstPackets = 10
	PacerInterval     = 2500 * time.Microsecond // 100 ms / (1.25 x 32)
	quicDatagramBytes = 1252                    // quic-go's first-flight datagram payload (1280 - 28)
)

// pacingDelay is how much later the last datagram of a server flight of n bytes leaves
// than its first, when it leaves in one go.
func pacingDelay(n int) time.Duration {
	packets := (n + quicDatagramBytes - 1) / quicDatagramBytes
	if packets <= PacerBurstPackets {
		return 0
	}
	return time.Duration(packets-PacerBurstPackets) * PacerInterval
}

// HandshakeTime predicts how long the handshake of HandshakeRTTs takes on the host's
// path (without jitter or processing). It differs from HandshakeRTTs x path RTT in two
// cases. A DoQ/DoH3 server whose whole first flight may leave at once (the address is
// validated) but exceeds the pacer's burst sends the rest paced (pacingDelay: chain-big
// is 12-13 datagrams, +5-7.5 ms; seen on the testbed as a 6 ms long flight in the qlog).
// And a DoQ/DoH3 amplification stall on a path longer than ClientInitialPTO. There the
// client's PTO fires before the server's first flight arrives; the client re-sends its
// Initial (RFC 9002 §6.2.4), the re-sent bytes raise the stalled server's budget
// (RFC 9000 §8.1) and the server sends the rest of its flight one PTO after the client's
// first Initial plus half a round trip, so the stall costs ClientInitialPTO instead of a
// round trip. The round trips the qlog shows are still HandshakeRTTs (the server's flight
// arrives in two parts).
func (p *Population) HandshakeTime(addr netip.Addr, port uint16, proto, phase string, client ClientHello) (time.Duration, bool) {
	n, ok := p.HandshakeRTTs(addr, port, proto, phase, client)
	if !ok {
		return 0, false
	}
	rtt := p.PathOf(addr).RTT
	d := time.Duration(n) * rtt
	stalls := p.Stalls(addr, port, proto, phase, client)
	if stalls && rtt > ClientInitialPTO {
		d -= rtt - ClientInitialPTO
	}
	if (proto == ProtoDoQ || proto == ProtoDoH3) && !stalls {
		d += pacingDelay(p.Certs[p.Lookup(addr).Cert].ServerFlightBytes(client))
	}
	return d, true
}

// Stalls reports whether the DoQ/DoH3 handshake in phase hits the anti-amplification
// limit: the first flight exceeds 3x the client's bytes and neither a Retry nor a valid
// NEW_TOKEN token validated the client's address.
func (p *Population) Stalls(addr netip.Addr, port uint16, proto, phase string, client ClientHello) bool {
	if proto != ProtoDoQ && proto != ProtoDoH3 {
		return false
	}
	if _, ok := p.HandshakeRTTs(addr, port, proto, phase, client); !ok {
		return false
	}
	r := p.Lookup(addr)
	tokenValid := phase == PhaseMeasured && r.Token == TokenHonour
	return !(r.Retries(proto, phase) || tokenValid) && p.Certs[r.Cert].ExceedsAmplification(client)
}

// Retries reports whether the server sends Retry to a client without a valid token in
// phase: retry=always always; retry=first on its DoQ ports at first contact only.
func (r *Record) Retries(proto, phase string) bool {
	return r.Retry || (r.RetryFirst && proto == ProtoDoQ && phase == PhaseFirstContact)
}

// ResolveRTTs is the round trips from the query's first packet to the answer: 1 for every
// protocol on an established session.
const ResolveRTTs = 1
