package drive

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/kstamp"
)

// TestBatch: WriteBatch sends every message in order; ReadBatch returns the answers
// with kernel times between the send and the read's return, marks a datagram longer
// than its buffer, and ends with a timeout at the read deadline.
func TestBatch(t *testing.T) {
	srv, c := loopbackPair(t)
	const n = 5
	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = []byte{byte(i), 'q', 'u', 'e', 'r', 'y'}
	}
	var wb, rb Batch
	before := time.Now()
	if sent, err := WriteBatch(c, &wb, msgs); err != nil || sent != n {
		t.Fatalf("WriteBatch = %d, %v", sent, err)
	}
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	for i := range n {
		m, from, err := srv.ReadFromUDP(buf)
		if err != nil || m != 6 || buf[0] != byte(i) {
			t.Fatalf("server read %d: %v, %v", i, buf[:m], err)
		}
		if _, err := srv.WriteToUDP(buf[:m], from); err != nil {
			t.Fatal(err)
		}
	}
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 64)
	}
	bufs[n-1] = make([]byte, 3) // datagram n-1 lands here (reads fill bufs in order)
	out := make([]Datagram, len(bufs))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := 0
	for got < n {
		k, err := ReadBatch(c, &rb, bufs[got:], out[got:])
		done := time.Now()
		if err != nil || k == 0 {
			t.Fatalf("ReadBatch = %d, %v after %d", k, err, got)
		}
		for i := got; i < got+k; i++ {
			d := out[i]
			if d.At.Before(before) || d.At.After(done) {
				t.Fatalf("datagram %d: kernel time %v not within [%v, %v]", i, d.At, before, done)
			}
			if bufs[i][0] != byte(i) {
				t.Fatalf("datagram %d holds %v", i, bufs[i][:d.N])
			}
			if want := i == n-1; d.Truncated != want || (!want && d.N != 6) || (want && d.N != 3) {
				t.Fatalf("datagram %d: %+v", i, d)
			}
		}
		got += k
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := ReadBatch(c, &rb, bufs, out); err == nil {
		t.Fatal("read past the deadline succeeded")
	} else if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("deadline error %v is not a timeout", err)
	}
}

// loopbackPair is a server socket and a kernel-stamped client connected to it.
func loopbackPair(t *testing.T) (*net.UDPConn, *kstamp.PacketConn) {
	t.Helper()
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	raw, err := net.DialUDP("udp4", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kstamp.NewPacketConn(raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}
