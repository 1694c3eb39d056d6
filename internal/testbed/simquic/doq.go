package simquic

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

const (
	queryReadTimeout = 10 * time.Second // a client that opens a stream and sends nothing
	wrongLengthExtra = 7                // wrong-length: the prefix claims this many bytes more than follow
	endlessChunk     = 4096
)

func (s *Server) acceptLoop(t *tport) {
	for {
		conn, err := t.ln.Accept(s.ctx)
		if err != nil {
			return
		}
		s.Stats.Conns.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.guard("conn", func() { s.serveConn(t, conn) })
		}()
	}
}

func (s *Server) serveConn(t *tport, conn *quic.Conn) {
	ctx := conn.Context()
	// Wait for the handshake (0-RTT connections are returned before it completes).
	select {
	case <-conn.HandshakeComplete():
	case <-ctx.Done():
		return
	case <-s.ctx.Done():
		conn.CloseWithError(quic.ApplicationErrorCode(doq.CodeNoError), "server shutting down")
		return
	}
	alpn := conn.ConnectionState().TLS.NegotiatedProtocol
	if alpn == alpnH3 {
		s.serveH3(t, conn)
		return
	}
	framing, err := doq.FramingFor(alpn)
	if alpn == "" && t.prof.noALPN() {
		framing, err = doq.NoALPNFraming, nil
	}
	if err != nil {
		// Neither DoQ nor h3: hold the connection without serving streams until the peer leaves.
		select {
		case <-ctx.Done():
		case <-s.ctx.Done():
		}
		return
	}
	var answered sync.WaitGroup // the streams within the query limit
	for n := 1; ; n++ {
		str, err := conn.AcceptStream(s.ctx)
		if err != nil {
			return
		}
		if t.prof.maxQueries > 0 && n > t.prof.maxQueries {
			// maxq=N: the connection carries N queries. The client asked for more: once the
			// N answers are written and have had two round trips to arrive, close it.
			answered.Wait()
			rtt := conn.ConnectionStats().SmoothedRTT
			select {
			case <-time.After(2*rtt + 10*time.Millisecond):
			case <-ctx.Done():
			}
			conn.CloseWithError(quic.ApplicationErrorCode(doq.CodeNoError), "query limit reached")
			return
		}
		answered.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer answered.Done()
			s.guard("stream", func() { s.serveStream(ctx, t.prof, framing, str) })
		}()
	}
}

func (s *Server) serveStream(ctx context.Context, prof profile, framing doq.Framing, str *quic.Stream) {
	_ = str.SetReadDeadline(time.Now().Add(queryReadTimeout))
	query, err := doq.ReadMessage(str, framing, doq.MaxMessageSize+2)
	if err != nil {
		// RFC 9250 §4.3.3: a malformed query is a protocol error.
		str.CancelRead(quic.StreamErrorCode(doq.CodeProtocolError))
		str.CancelWrite(quic.StreamErrorCode(doq.CodeProtocolError))
		return
	}
	s.Stats.Queries.Add(1)
	switch prof.hostile {
	case hostile.Stall:
		s.hold(ctx)
		str.CancelWrite(quic.StreamErrorCode(doq.CodeNoError))
		return
	case hostile.Reset:
		str.CancelWrite(quic.StreamErrorCode(doq.CodeInternalError))
		return
	case hostile.Endless:
		s.endless(ctx, str)
		return
	}
	resp, err := answer(s.cfg.Population, query, prof.rcode)
	if err != nil {
		str.CancelWrite(quic.StreamErrorCode(doq.CodeProtocolError))
		return
	}
	var out []byte
	switch prof.hostile {
	case hostile.Truncated:
		out, _ = doq.Frame(framing, resp[:len(resp)/2])
	case hostile.WrongLength:
		out = binary.BigEndian.AppendUint16(nil, uint16(len(resp)+wrongLengthExtra))
		out = append(out, resp...)
	default:
		out, _ = doq.Frame(framing, resp)
	}
	_ = str.SetWriteDeadline(time.Now().Add(s.cfg.HoldTimeout))
	if _, err := str.Write(out); err != nil {
		return
	}
	str.Close() // FIN: RFC 9250 §4.2, one message per stream
}

// hold waits until the connection or the server ends, at most HoldTimeout.
func (s *Server) hold(ctx context.Context) {
	t := time.NewTimer(s.cfg.HoldTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-s.ctx.Done():
	case <-t.C:
	}
}

// endless writes a length prefix announcing the largest message, then filler for as long
// as the client reads (flow control paces it), at most HoldTimeout.
func (s *Server) endless(ctx context.Context, str *quic.Stream) {
	deadline := time.Now().Add(s.cfg.HoldTimeout)
	_ = str.SetWriteDeadline(deadline)
	chunk := make([]byte, endlessChunk)
	binary.BigEndian.PutUint16(chunk, doq.MaxMessageSize)
	for time.Now().Before(deadline) && ctx.Err() == nil && s.ctx.Err() == nil {
		if _, err := str.Write(chunk); err != nil {
			return
		}
		chunk[0], chunk[1] = 0, 0
	}
	str.CancelWrite(quic.StreamErrorCode(doq.CodeNoError))
}

var errNotQuery = errors.New("not a DNS query")

// answer builds the response to a DNS query: rcode as the population says; NOERROR
// answers A/IN queries with the population's answer address and anything else with no
// records. The ID is echoed (RFC 9250 §4.2.1: it is 0 on DoQ).
func answer(pop *population.Population, query []byte, rcode string) ([]byte, error) {
	req := new(dns.Msg)
	if err := req.Unpack(query); err != nil {
		return nil, err
	}
	if req.Response || len(req.Question) != 1 {
		return nil, errNotQuery
	}
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	switch rcode {
	case "REFUSED":
		m.Rcode = dns.RcodeRefused
	case "SERVFAIL":
		m.Rcode = dns.RcodeServerFailure
	default:
		q := req.Question[0]
		if q.Qclass == dns.ClassINET && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: pop.AnswerTTL},
				A:   pop.Answer.AsSlice(),
			})
		}
	}
	return m.Pack()
}
