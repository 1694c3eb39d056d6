package doq

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/certs/certtest"
)

// loopbackServer serves QUIC on 127.0.0.1 with the given ALPNs and hands each stream to
// handle (which owns it).
func loopbackServer(t *testing.T, alpns []string, handle func(*quic.Stream)) string {
	t.Helper()
	leaf, key := certtest.SelfSignedLeaf(t, certtest.ECDSA, "localhost")
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{certtest.TLS(leaf, key)},
		NextProtos:   alpns,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go func() {
				for {
					str, err := conn.AcceptStream(context.Background())
					if err != nil {
						return
					}
					go handle(str)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func dialLoopback(t *testing.T, addr, alpn string) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(CodeNoError, "") })
	return conn
}

var testMsg = []byte{0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'c', 'o', 'm', 0, 0, 1, 0, 1}

// The query goes out framed as the ALPN says, with the FIN after it; the reply comes back
// unframed; OnSend runs once, before the query's bytes leave.
func TestExchangeFramesBothWays(t *testing.T) {
	for _, alpn := range []string{"doq", "doq-i02"} {
		t.Run(alpn, func(t *testing.T) {
			f, _ := FramingFor(alpn)
			got := make(chan []byte, 1)
			addr := loopbackServer(t, []string{alpn}, func(str *quic.Stream) {
				b, _ := io.ReadAll(str) // to the FIN: the client must close its send side
				got <- b
				q, err := ReadMessage(bytes.NewReader(b), f, 0)
				if err != nil {
					str.CancelWrite(CodeProtocolError)
					return
				}
				out, _ := Frame(f, append([]byte{'r'}, q...))
				str.Write(out)
				str.Close()
			})
			conn := dialLoopback(t, addr, alpn)
			sends := 0
			reply, err := Exchange(context.Background(), conn, f, testMsg, ExchangeOptions{OnSend: func() {
				sends++
				if len(got) != 0 {
					t.Error("OnSend ran after the server had the query")
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			if want := append([]byte{'r'}, testMsg...); !bytes.Equal(reply, want) {
				t.Errorf("reply %x, want %x", reply, want)
			}
			wire, _ := Frame(f, testMsg)
			if b := <-got; !bytes.Equal(b, wire) {
				t.Errorf("server read %x, want %x", b, wire)
			}
			if sends != 1 {
				t.Errorf("OnSend ran %d times", sends)
			}
		})
	}
}

// A reply whose length prefix disagrees with the stream, or a stream longer than the
// limit, is an ExchangeError of the read step wrapping the framing's sentinel.
func TestExchangeRejectsBrokenFraming(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply []byte
		limit int
		want  error
	}{
		{"prefix says more", []byte{0, 9, 1, 2, 3}, 0, ErrBadLength},
		{"prefix says less", []byte{0, 1, 1, 2, 3}, 0, ErrBadLength},
		{"no prefix", []byte{7}, 0, ErrBadLength},
		{"longer than the limit", binary.BigEndian.AppendUint16(nil, 64), 30, ErrStreamTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply := tc.reply
			if errors.Is(tc.want, ErrStreamTooLong) {
				reply = append(reply, make([]byte, 64)...)
			}
			addr := loopbackServer(t, []string{"doq"}, func(str *quic.Stream) {
				io.ReadAll(str)
				str.Write(reply)
				str.Close()
			})
			conn := dialLoopback(t, addr, "doq")
			_, err := Exchange(context.Background(), conn, LengthPrefixed, testMsg, ExchangeOptions{Limit: tc.limit})
			if !errors.Is(err, tc.want) || StepOf(err) != StepRead {
				t.Fatalf("err %v (step %q), want %v at %q", err, StepOf(err), tc.want, StepRead)
			}
		})
	}
}

// A server that never answers: the read ends at the context's deadline, or when the
// context is cancelled, and the server is told DOQ_REQUEST_CANCELLED (STOP_SENDING).
func TestExchangeEndsWithTheContext(t *testing.T) {
	for _, mode := range []string{"deadline", "cancel"} {
		t.Run(mode, func(t *testing.T) {
			read := make(chan struct{})
			cause := make(chan error, 1)
			addr := loopbackServer(t, []string{"doq"}, func(str *quic.Stream) {
				io.ReadAll(str)
				close(read)
				<-str.Context().Done() // the client stopped reading
				cause <- context.Cause(str.Context())
			})
			conn := dialLoopback(t, addr, "doq")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if mode == "deadline" {
				ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			} else {
				go func() {
					<-read
					cancel()
				}()
			}
			_, err := Exchange(ctx, conn, LengthPrefixed, testMsg, ExchangeOptions{})
			if StepOf(err) != StepRead || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("err %v (step %q), want a read deadline", err, StepOf(err))
			}
			var se *quic.StreamError
			if c := <-cause; !errors.As(c, &se) || se.ErrorCode != CodeRequestCancelled {
				t.Errorf("server saw %v, want STOP_SENDING with DOQ_REQUEST_CANCELLED", c)
			}
		})
	}
}

// A query too large for the framing is refused before anything is sent.
func TestExchangeRefusesOversizedQuery(t *testing.T) {
	addr := loopbackServer(t, []string{"doq"}, func(str *quic.Stream) { str.CancelRead(CodeProtocolError) })
	conn := dialLoopback(t, addr, "doq")
	sent := false
	_, err := Exchange(context.Background(), conn, LengthPrefixed, make([]byte, MaxMessageSize+1),
		ExchangeOptions{OnSend: func() { sent = true }})
	if !errors.Is(err, ErrMessageTooLarge) || sent {
		t.Fatalf("err %v (sent: %v), want ErrMessageTooLarge before sending", err, sent)
	}
}
