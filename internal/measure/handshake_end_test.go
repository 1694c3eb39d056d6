package measure_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/kstamp"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/quicwire"
)

// readAheadWait bounds the read ahead of readAhead: the datagram it waits for is one the
// server sends right behind its flight, without waiting for us.
const readAheadWait = 2 * time.Second

// readAhead is a slow client's socket: when quic-go asks for a datagram that carries
// Handshake packets, it first reads the next datagram too (the server's 0.5-RTT data,
// or the answer to a 0-RTT query), so the kernel-stamped log under it has seen a later
// arrival before quic-go sees the server's flight end. It also gives the ground truth,
// from the packet types (not from the qlog): the server's flight ends with the last
// datagram carrying Handshake packets that arrived up to the first datagram carrying a
// 1-RTT packet (a server sends 1-RTT packets once its flight is out, RFC 9001 §4.1.4;
// Handshake packets after that are retransmissions).
type readAhead struct {
	net.PacketConn
	log *kstamp.Log

	mu       sync.Mutex
	held     []byte
	heldFrom net.Addr
	end      time.Time // kernel arrival of the flight's last datagram
	oneRTT   bool      // a datagram with a 1-RTT packet was read
	ahead    int       // datagrams read ahead of a Handshake datagram
}

func (c *readAhead) ReadFrom(p []byte) (int, net.Addr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var (
		n    int
		from net.Addr
	)
	if c.held != nil {
		n, from = copy(p, c.held), c.heldFrom
		c.held = nil
	} else {
		var err error
		if n, from, err = c.PacketConn.ReadFrom(p); err != nil {
			return n, from, err
		}
	}
	pkts := quicwire.Packets(p[:n], 0)
	if !quicwire.Has(pkts, quicwire.Handshake) || c.oneRTT {
		c.oneRTT = c.oneRTT || quicwire.Has(pkts, quicwire.Short)
		return n, from, nil
	}
	c.oneRTT = quicwire.Has(pkts, quicwire.Short)
	if at, ok := c.log.ArrivalOfDatagram(kstamp.DatagramChecksum(p[:n]), time.Time{}); ok {
		c.end = at
	}
	next := make([]byte, len(p))
	_ = c.PacketConn.SetReadDeadline(time.Now().Add(readAheadWait))
	m, nfrom, err := c.PacketConn.ReadFrom(next)
	_ = c.PacketConn.SetReadDeadline(time.Time{})
	switch {
	case err == nil:
		c.held, c.heldFrom = next[:m], nfrom
		c.ahead++
	case !errors.Is(err, os.ErrDeadlineExceeded):
		return 0, nil, err
	}
	return n, from, nil
}

// TestHandshakeEndsAtTheCompletingDatagram: a DoQ or DoH3 handshake ends at the kernel
// arrival of the datagram that carried the server's flight end, not at a later datagram
// the client had read by the time its dial returned: the server's 0.5-RTT data right
// behind a flight too big to share a datagram with it (fresh), and the answer to a 0-RTT
// query (0rtt, where the dial returns before the handshake completes). The client is
// made slow by reading that later datagram before quic-go sees the flight's end.
func TestHandshakeEndsAtTheCompletingDatagram(t *testing.T) {
	// A 5,000-byte chain fills the flight's last datagram, so quic-go's server sends its
	// 0.5-RTT packet (NEW_CONNECTION_ID) in a datagram of its own right behind it; the
	// hybrid key share's two Initials give the server the budget for the whole flight
	// (RFC 9000 §8.1), so no stall waits on the slow client's acknowledgement.
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.2", Allow0RTT: true, ChainBytes: 5000,
		QUICDelay: 5 * time.Millisecond})
	for _, p := range []measure.Protocol{measure.DoQ, measure.DoH3} {
		for _, mode := range []measure.Mode{measure.ModeFresh, measure.Mode0RTT} {
			t.Run(string(p)+"/"+string(mode), func(t *testing.T) {
				m, err := measure.For(p)
				if err != nil {
					t.Fatal(err)
				}
				peer := measure.NewPeer()
				if mode == measure.Mode0RTT {
					warm := s.Request(p)
					warm.Mode, warm.Peer = measure.ModeResumed, peer
					if res := m.Measure(context.Background(), warm); res.Status != measure.StatusOK {
						t.Fatalf("warm-up: %s: %v", res.Status, res.Err)
					}
				}
				req := s.Request(p)
				req.Mode, req.Peer, req.KeyShare = mode, peer, measure.KeyShareMLKEM
				var c *readAhead
				measure.SetListenPacket(req, func(pc net.PacketConn, log *kstamp.Log) net.PacketConn {
					c = &readAhead{PacketConn: pc, log: log}
					return c
				})
				res := m.Measure(context.Background(), req)
				if res.Status != measure.StatusOK || !res.HasHandshake {
					t.Fatalf("status %s (%v), handshake %v", res.Status, res.Err, res.HasHandshake)
				}
				if mode == measure.Mode0RTT && (res.Used0RTT == nil || !*res.Used0RTT) {
					t.Fatal("0-RTT not used: the answer to an early query is what follows the flight here")
				}
				c.mu.Lock()
				last, ahead := c.end, c.ahead
				c.mu.Unlock()
				if ahead == 0 || last.IsZero() {
					t.Fatalf("read ahead %d times, flight's end %v: the case is not exercised", ahead, last)
				}
				if res.CryptoTo.IsZero() {
					t.Fatalf("handshake %v not kernel-stamped; the flight's last datagram arrived at %v", res.Handshake, last)
				}
				if !res.CryptoTo.Equal(last) || res.Handshake != res.CryptoTo.Sub(res.CryptoFrom) {
					t.Errorf("handshake %v ends at %v, %v after the flight's last datagram arrived (%v); want it to end there",
						res.Handshake, res.CryptoTo, res.CryptoTo.Sub(last), last)
				}
				if res.Handshake < 5*time.Millisecond {
					t.Errorf("handshake %v, shorter than the emulated 5 ms round trip", res.Handshake)
				}
			})
		}
	}
}
