package measure_test

import (
	"context"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// TestZeroRTTRejected: in 0-RTT mode against a server that accepts the early data and one
// that resumes the session but rejects it, the query is answered. A query the server
// rejected is sent again in 1-RTT on the same connection (RFC 9001 §4.6.2: 0-RTT data the
// server rejected is lost), its start kept at its first send, and the result says the
// session was resumed without 0-RTT. DoQ queries and DoH3 GETs leave as early data,
// before the handshake completes; DoH3 POSTs wait for it. The server holds its flight
// of a dial that offers early data until our query has reached it (at most earlyDataWait): which
// comes first, the query or the handshake's end, is decided by the client's code, not by
// how soon it is scheduled (a rejected early query leaves earlyDataWait before the
// handshake can end).
func TestZeroRTTRejected(t *testing.T) {
	for _, reject := range []bool{false, true} {
		// An emulated RTT of 30 ms sets the early sends (within a few ms of the dial)
		// well apart from the handshake's end.
		s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.2", Allow0RTT: true, Reject0RTT: reject,
			QUICDelay: 30 * time.Millisecond, EarlyDataWait: earlyDataWait})
		for _, c := range []struct {
			p       measure.Protocol
			variant string
			early   bool
		}{{measure.DoQ, "", true}, {measure.DoH3, measure.VariantGET, true}, {measure.DoH3, measure.VariantPOST, false}} {
			name := string(c.p) + c.variant + "/accepted"
			if reject {
				name = string(c.p) + c.variant + "/rejected"
			}
			t.Run(name, func(t *testing.T) {
				m, err := measure.For(c.p)
				if err != nil {
					t.Fatal(err)
				}
				peer := measure.NewPeer()
				warm := s.Request(c.p)
				warm.Mode, warm.Peer, warm.Variant = measure.ModeResumed, peer, c.variant
				wres := m.Measure(context.Background(), warm)
				if wres.Status != measure.StatusOK {
					t.Fatalf("warm-up: status %s: %v", wres.Status, wres.Err)
				}
				req := s.Request(c.p)
				req.Mode, req.Peer, req.Variant = measure.Mode0RTT, peer, c.variant
				res := m.Measure(context.Background(), req)
				if res.Status != measure.StatusOK {
					t.Fatalf("status %s: %v", res.Status, res.Err)
				}
				// The server holds its flight only for a ClientHello that offers early
				// data: the 0-RTT dial's, not the warm-up's.
				if s.OfferedEarlyData(wres.Local.Port()) || !s.OfferedEarlyData(res.Local.Port()) {
					t.Errorf("early data offered: warm-up %v, 0-RTT dial %v; want false, true",
						s.OfferedEarlyData(wres.Local.Port()), s.OfferedEarlyData(res.Local.Port()))
				}
				if res.Resumed == nil || !*res.Resumed || res.Used0RTT == nil || *res.Used0RTT == reject {
					t.Errorf("resumed %v, 0-RTT used %v; want resumed, 0-RTT used %v", deref(res.Resumed), deref(res.Used0RTT), !reject)
				}
				if len(res.Queries) != 1 {
					t.Fatalf("%d queries, want 1", len(res.Queries))
				}
				q := res.Queries[0]
				if q.Status != measure.StatusOK || len(q.Answers) != 1 || q.Answers[0] != s.Answer.String() {
					t.Errorf("query: %s %v %v", q.Status, q.Err, q.Answers)
				}
				// res.Handshake runs from our first packet to the handshake's end; the
				// exchange starts before that packet, so this is at or before the end.
				handshakeDone := res.StartedAt.Add(res.Handshake)
				if q.StartedAt.Before(res.StartedAt) || q.Resolve <= 0 || !res.HasHandshake || res.Handshake < 30*time.Millisecond {
					t.Errorf("query started %v (exchange %v), resolve %v, handshake %v (%v)", q.StartedAt, res.StartedAt, q.Resolve, res.Handshake, res.HasHandshake)
				}
				// Sent again after a rejection, an early query is answered no sooner than
				// the handshake (one RTT) plus its own round trip: its resolve time, from
				// its first send, includes the rejected attempt.
				if reject && c.early && q.Resolve < 60*time.Millisecond {
					t.Errorf("resolve %v, want at least 2 x 30 ms from the first send", q.Resolve)
				}
				if early := q.StartedAt.Before(handshakeDone); early != c.early {
					t.Errorf("query started %v, handshake complete %v: sent before it %v, want %v",
						q.StartedAt, handshakeDone, early, c.early)
				}
			})
		}
	}
}

// earlyDataWait bounds how long the server waits for a query that cannot come before the
// handshake ends (a POST, a rejected early query): those subtests take this much longer.
const earlyDataWait = 500 * time.Millisecond

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}
