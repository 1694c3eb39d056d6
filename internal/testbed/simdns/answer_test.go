package simdns

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzRespond feeds arbitrary bytes as a query to every class and transport: respond must
// never panic, and an answering class must either stay silent or produce a message that
// parses (the hostile classes excepted, which exist to be unparseable).
func FuzzRespond(f *testing.F) {
	q, _ := query("test.com").Pack()
	f.Add(q)
	m := query("example.org")
	m.SetEdns0(4096, true)
	o := m.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_TCP_KEEPALIVE{Code: dns.EDNS0TCPKEEPALIVE})
	q2, _ := m.Pack()
	f.Add(q2)
	f.Add([]byte{})
	f.Add(make([]byte, headerLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range Classes {
			for _, p := range allProtocols {
				wire, ok := respond(b, Behaviour{Class: c, Keepalive: true}, p, 10*time.Second)
				if !ok {
					continue
				}
				if c == ClassAnswer || c == ClassRefused || c == ClassWrongID {
					if err := new(dns.Msg).Unpack(wire); err != nil {
						t.Fatalf("%s/%s: reply does not parse: %v", c, p, err)
					}
				}
			}
		}
	})
}

// FuzzStream feeds arbitrary client bytes to the DoTCP/DoT stream loop (length prefixes,
// queries, pipelining): it must neither panic nor hang, and every reply it writes must be
// a well-framed DNS message.
func FuzzStream(f *testing.F) {
	q, _ := query("test.com").Pack()
	one := append([]byte{byte(len(q) >> 8), byte(len(q))}, q...)
	f.Add(one)
	f.Add(append(append([]byte{}, one...), one...))
	f.Add([]byte{0, 0})
	f.Add([]byte{0xff, 0xff, 1})
	f.Add(one[:len(one)-3])
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, c := range []Class{ClassAnswer, ClassRefused, ClassWrongLength} {
			s := &Server{ctx: context.Background(), log: slog.New(slog.DiscardHandler)}
			s.cfg.Limits.defaults()
			conn := &bufConn{r: bytes.NewReader(in)}
			s.serveStream(conn, Behaviour{Class: c}, DoTCP) // returns at the input's EOF
			out := conn.w.Bytes()
			for len(out) >= 2 && c != ClassWrongLength {
				n := int(binary.BigEndian.Uint16(out))
				if len(out) < 2+n {
					t.Fatalf("%s: reply framed for %d bytes, %d follow", c, n, len(out)-2)
				}
				if err := new(dns.Msg).Unpack(out[2 : 2+n]); err != nil {
					t.Fatalf("%s: reply does not parse: %v", c, err)
				}
				out = out[2+n:]
			}
		}
	})
}

// bufConn is a net.Conn reading a fixed input (then EOF) and recording what is written.
type bufConn struct {
	r *bytes.Reader
	w bytes.Buffer
}

func (c *bufConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *bufConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *bufConn) Close() error                     { return nil }
func (c *bufConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *bufConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *bufConn) SetDeadline(time.Time) error      { return nil }
func (c *bufConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bufConn) SetWriteDeadline(time.Time) error { return nil }
