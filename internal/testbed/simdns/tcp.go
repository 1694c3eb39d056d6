package simdns

import (
	"encoding/binary"
	"io"
	"net"
	"time"
)

// lengthPrefixLen is the 2-octet length field before every DNS message on a stream
// (RFC 1035 §4.2.2; reused by RFC 7858 §3.3 for DoT).
const lengthPrefixLen = 2

// wrongLengthExcess is how many bytes ClassWrongLength's prefix claims beyond the message.
const wrongLengthExcess = 16

// endlessLength is the length prefix ClassEndless announces before its trickle.
const endlessLength = 0xffff

// serveStream answers length-prefixed queries on c (DoTCP, or DoT after the handshake)
// one after another until the peer closes, a query is malformed, or the connection idles
// for IdleTimeout (RFC 7766 §6.2.3: servers close idle connections; queries may be
// pipelined, answered here in order).
func (s *Server) serveStream(c net.Conn, b Behaviour, p Protocol) {
	defer c.Close()
	idle := s.cfg.Limits.IdleTimeout
	if b.Idle > 0 {
		idle = b.Idle
	}
	var pfx [lengthPrefixLen]byte
	buf := make([]byte, 0, 512)
	for answered := 0; b.MaxQueries == 0 || answered < b.MaxQueries; answered++ {
		c.SetReadDeadline(time.Now().Add(idle))
		if _, err := io.ReadFull(c, pfx[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(pfx[:]))
		if n < headerLen || n > s.cfg.Limits.MaxQueryTCP {
			return
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		switch b.Class {
		case ClassStall:
			s.hold(c)
			return
		case ClassEndless:
			s.trickle(c, binary.BigEndian.AppendUint16(nil, endlessLength))
			return
		}
		wire, ok := respond(buf, b, p, idle)
		if !ok {
			return
		}
		l := len(wire)
		if b.Class == ClassWrongLength {
			l += wrongLengthExcess
		}
		out := make([]byte, 0, lengthPrefixLen+len(wire))
		out = binary.BigEndian.AppendUint16(out, uint16(l))
		out = append(out, wire...)
		c.SetWriteDeadline(time.Now().Add(idle))
		if _, err := c.Write(out); err != nil {
			return
		}
		if b.Class == ClassWrongLength {
			return
		}
	}
}
