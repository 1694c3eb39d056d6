package measure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
)

// FuzzIDMux feeds arbitrary messages to the answer matcher of pipelined/UDP sessions:
// whatever arrives (short, garbage, the query's ID on garbage, a real answer), a query
// ends with a classified outcome and nothing panics.
func FuzzIDMux(f *testing.F) {
	f.Add([]byte{}, true)
	f.Add([]byte{0}, true)
	f.Add(make([]byte, 12), true)
	f.Add([]byte("\x00\x00\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x07example\x00\x00\x01\x00\x01"), true)
	f.Add([]byte("\x12\x34\x81\x80"), false)
	f.Fuzz(func(t *testing.T, msg []byte, ours bool) {
		sent := make(chan []byte, 1)
		reads := make(chan []byte, 2)
		m := newIDMux(func() ([]byte, time.Time, error) {
			b, ok := <-reads
			if !ok {
				return nil, time.Time{}, errClosedEarly
			}
			return b, time.Now(), nil
		}, func(b []byte) error { sent <- b; return nil })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		go func() {
			q := <-sent
			b := append([]byte(nil), msg...)
			if ours && len(b) >= 2 {
				copy(b, q[:2]) // the query's ID
			}
			reads <- b
			close(reads)
		}()
		out := m.exchange(ctx, dnsmsg.Query{Name: "a.example", Type: 1}, 0, func(b []byte) []byte { return b })
		if out.Status == "" || (out.Status != StatusOK) == (out.Err == nil) {
			t.Fatalf("outcome %q err %v", out.Status, out.Err)
		}
		if out.Status != StatusOK && !errors.Is(out.Err, errClosedEarly) && out.Status != StatusBadResponse {
			t.Fatalf("outcome %q: %v", out.Status, out.Err)
		}
	})
}
