package simquic

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"

	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/sockopt"
)

// Responders that are not QUIC servers: they answer on QUIC ports with garbage, with a
// malformed Version Negotiation packet, or with a valid one listing only versions no
// client of ours speaks. Packet layouts: RFC 9000 §17.2 (long header) and §17.2.1 (VN).

const (
	minProbeSize = 1200 // RFC 9000 §14.1: servers ignore shorter Initials; VN only answers 1200+ bytes (FIELD-NOTES)
	maxCIDLen    = 20   // RFC 9000 §17.2: connection IDs are at most 20 bytes in QUIC v1
	longHeader   = 0x80 // RFC 9000 §17.2: header form bit
	garbageMin   = 16
	garbageMax   = 200
)

// longHeaderIDs parses the version and connection IDs of a long-header packet.
func longHeaderIDs(b []byte) (version uint32, dcid, scid []byte, ok bool) {
	if len(b) < 7 || b[0]&longHeader == 0 {
		return 0, nil, nil, false
	}
	version = binary.BigEndian.Uint32(b[1:5])
	dl := int(b[5])
	if dl > maxCIDLen || len(b) < 6+dl+1 {
		return 0, nil, nil, false
	}
	dcid = b[6 : 6+dl]
	sl := int(b[6+dl])
	if sl > maxCIDLen || len(b) < 7+dl+sl {
		return 0, nil, nil, false
	}
	scid = b[7+dl : 7+dl+sl]
	return version, dcid, scid, true
}

// versionNegotiation builds a VN packet answering a packet with dcid/scid (RFC 9000
// §17.2.1: the client's SCID becomes our DCID and vice versa). cut drops the last two
// bytes, leaving a version list whose length is not a multiple of 4 (malformed).
func versionNegotiation(dcid, scid []byte, versions []uint32, cut bool) []byte {
	out := make([]byte, 0, 7+len(dcid)+len(scid)+4*len(versions))
	out = append(out, 0xc0|byte(rand.IntN(0x40))) // header form and the QUIC bit (RFC 9443), rest random
	out = binary.BigEndian.AppendUint32(out, 0)   // version 0 marks Version Negotiation
	out = append(out, byte(len(scid)))
	out = append(out, scid...)
	out = append(out, byte(len(dcid)))
	out = append(out, dcid...)
	for _, v := range versions {
		out = binary.BigEndian.AppendUint32(out, v)
	}
	if cut {
		out = out[:len(out)-2]
	}
	return out
}

// greaseVersion returns a random reserved version 0x?a?a?a?a (RFC 9000 §15), as quic-go
// and quinn add to their VN lists so clients never rely on the list being exhaustive,
// other than client (the version the client sent). A real stack lists the client's own
// version by chance once in 65,536 VN packets (the scanner's grease probe version is
// one of the 65,536), and a client must discard such a VN (RFC 9000 §6.2; zprobe's
// classifier says quic-vn-invalid, covered by its unit tests). The testbed leaves that
// coincidence out, so that what a scan finds is a function of the population.
func greaseVersion(client uint32) uint32 {
	for {
		if v := rand.Uint32()&0xf0f0f0f0 | 0x0a0a0a0a; v != client {
			return v
		}
	}
}

func garbage() []byte {
	b := make([]byte, garbageMin+rand.IntN(garbageMax-garbageMin))
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	b[0] &= 0x3f // neither a long header nor a valid short header (fixed bit clear)
	return b
}

// rawReply returns what a raw hostile responder sends for datagram b, or nil.
func rawReply(r *population.Record, b []byte) []byte {
	if r.Hostile == hostile.Garbage {
		return garbage()
	}
	version, dcid, scid, ok := longHeaderIDs(b)
	if !ok || version == 0 || len(b) < minProbeSize {
		return nil
	}
	var versions []uint32
	for _, v := range r.Versions {
		n, _ := quicver.Lookup(v)
		if n == version && r.Hostile == hostile.DraftOnly {
			return nil // a version we "speak": a real stack would start a handshake; we cannot
		}
		versions = append(versions, n)
	}
	if len(versions) == 0 {
		versions = []uint32{1}
	}
	return versionNegotiation(dcid, scid, versions, r.Hostile == hostile.BadVN)
}

func (s *Server) raw(sock *net.UDPConn, r *population.Record, dst netip.Addr, src *net.UDPAddr, b []byte) {
	reply := rawReply(r, b)
	if reply == nil {
		return
	}
	if _, _, err := sock.WriteMsgUDP(reply, sockopt.PktinfoSrc(dst), src); err != nil {
		s.log.Debug("simquic: raw reply", "to", src, "err", err)
	}
}
