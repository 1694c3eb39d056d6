package measure

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/kstamp"
)

// FuzzTCPPipeline feeds an arbitrary byte stream as the answers to a pipelined DoTCP
// session of two queries (ours: the first frame carries the first query's ID): whatever
// arrives (short frames, garbage, a real answer, a stream that ends anywhere), every
// query ends with a classified outcome, in time, and nothing panics.
func FuzzTCPPipeline(f *testing.F) {
	f.Add([]byte{}, true)
	f.Add([]byte{0, 1, 0}, true)
	f.Add(append([]byte{0, 12}, make([]byte, 12)...), true)
	ans := []byte("\x00\x00\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x07example\x00\x00\x01\x00\x01")
	f.Add(append([]byte{0, byte(len(ans))}, ans...), true)
	f.Add(append(append([]byte{0, byte(len(ans))}, ans...), 0, byte(len(ans))), true)
	f.Add([]byte("\x00\x04\x12\x34\x81\x80"), false)
	f.Fuzz(func(t *testing.T, stream []byte, ours bool) {
		cli, srv := net.Pipe()
		defer cli.Close()
		go func() {
			defer srv.Close()
			var l [2]byte
			if _, err := io.ReadFull(srv, l[:]); err != nil {
				return
			}
			q := make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(srv, q); err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, srv) }()
			b := append([]byte(nil), stream...)
			if ours && len(b) >= 4 && len(q) >= 2 {
				copy(b[2:], q[:2])
			}
			_, _ = srv.Write(b)
		}()
		c := &timedConn{Conn: cli, log: &kstamp.Log{}}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		stop := context.AfterFunc(ctx, func() { _ = cli.SetDeadline(time.Now()) })
		defer stop()
		req := &Request{Mode: ModePersistent, Streams: 2, QueryTimeout: 300 * time.Millisecond,
			Next: func(_ context.Context, seq int) (string, uint16, bool) { return "a.example", 1, seq < 2 }}
		res := &Result{}
		res.Queries = drive(ctx, tcpSession(req, c))
		// The pipeline ends on its 300 ms query timeout: had it waited for the context's
		// 2 s deadline instead, the context would be done by now.
		if ctx.Err() != nil {
			t.Fatalf("ran into the context's deadline (%v): the query timeout was not honoured", ctx.Err())
		}
		if len(res.Queries) == 0 {
			t.Fatal("no outcome")
		}
		for _, q := range res.Queries {
			if q.Status == "" || (q.Status != StatusOK) == (q.Err == nil) {
				t.Fatalf("outcome %q err %v", q.Status, q.Err)
			}
			// net.Pipe's own error for a write after the peer closed (TCP: EPIPE).
			if q.Status == StatusError && !errors.Is(q.Err, errClosedEarly) && !errors.Is(q.Err, io.ErrClosedPipe) {
				t.Fatalf("unclassified: %v", q.Err)
			}
		}
	})
}
