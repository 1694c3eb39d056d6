package measure

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/doqscan/doqscan/internal/testsupport/h2peer"
)

// TestDoHResponses: x/net's client, as measure runs it, ends each kind of response
// (h2peer.Responses, the cases dnsbench's h2fast is held to as well) with the body or
// the status it deserves, and stops a stream it gives up on: a RST_STREAM on it, or
// the connection's end (GOAWAY or close) where x/net treats the fault as the
// connection's.
func TestDoHResponses(t *testing.T) {
	for _, c := range h2peer.Responses {
		t.Run(c.Name, func(t *testing.T) {
			var h *h2Conn
			p := h2peer.Pair(t, func(cc net.Conn) {
				var err error
				if h, err = newH2Conn(cc); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(h.Close)
			})
			type result struct {
				body []byte
				err  error
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan result, 1)
			go func() {
				body, _, err := h.Exchange(ctx, &Request{Addr: netip.MustParseAddrPort("192.0.2.1:443"), ServerName: "resolver.example"}, []byte("query"), func() {})
				done <- result{body, err}
			}()
			f := p.Next(http2.FrameHeaders)
			c.Serve(p, f.Stream)
			r := <-done
			if got := Classify(r.err); string(got) != c.Status || string(r.body) != c.Want {
				t.Fatalf("body %q, status %s (%v); want %q, %s", r.body, got, r.err, c.Want, c.Status)
			}
			if c.Stops {
				for g := range p.Frames {
					if g.Type == http2.FrameRSTStream && g.Stream == f.Stream || g.Type == http2.FrameGoAway {
						return
					}
				}
				// The connection ended: x/net closed it.
			}
		})
	}
}

// serverFrames is what a server might send: each case's frames, written by x/net's framer.
func serverFrames(t testing.TB, write func(fr *http2.Framer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := write(http2.NewFramer(&b, nil)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestH2FramesRecord: the record of the server's frames gives the first SETTINGS's
// SETTINGS_MAX_CONCURRENT_STREAMS (nil when it names none; a later SETTINGS does not
// change it), the streams the server reset and its GOAWAY, whatever the reads' sizes.
func TestH2FramesRecord(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	for _, c := range []struct {
		name   string
		write  func(fr *http2.Framer) error
		max    *uint32
		reset  []uint32
		goAway bool
	}{
		{"limit", func(fr *http2.Framer) error {
			return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 7})
		}, u32(7), nil, false},
		{"no limit", func(fr *http2.Framer) error {
			return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		}, nil, nil, false},
		{"a later SETTINGS", func(fr *http2.Framer) error {
			if err := fr.WriteSettings(); err != nil {
				return err
			}
			if err := fr.WriteSettingsAck(); err != nil {
				return err
			}
			return fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 3})
		}, nil, nil, false},
		{"reset and goaway", func(fr *http2.Framer) error {
			if err := fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 100}); err != nil {
				return err
			}
			if err := fr.WriteData(1, false, make([]byte, 3000)); err != nil {
				return err
			}
			if err := fr.WriteRSTStream(3, http2.ErrCodeRefusedStream); err != nil {
				return err
			}
			return fr.WriteGoAway(3, http2.ErrCodeNo, []byte("bye"))
		}, u32(100), []uint32{3}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := serverFrames(t, c.write)
			for _, chunk := range []int{len(b), 1, 5, 9, 10} {
				f := &h2Frames{}
				for rest := b; len(rest) > 0; {
					n := min(chunk, len(rest))
					f.follow(rest[:n])
					rest = rest[n:]
				}
				got := f.maxStreams()
				if (got == nil) != (c.max == nil) || got != nil && *got != *c.max {
					t.Errorf("reads of %d: max streams %v, want %v", chunk, got, c.max)
				}
				for _, id := range c.reset {
					if !f.resetByPeer(id) {
						t.Errorf("reads of %d: stream %d reset not seen", chunk, id)
					}
				}
				if f.resetByPeer(1) {
					t.Errorf("reads of %d: stream 1 seen as reset", chunk)
				}
				if f.goneAway() != c.goAway {
					t.Errorf("reads of %d: goaway %v, want %v", chunk, f.goneAway(), c.goAway)
				}
			}
		})
	}
}

// FuzzH2Frames: any bytes from the server leave the record consistent, and read in two
// parts it holds what it holds read at once.
func FuzzH2Frames(f *testing.F) {
	f.Add(serverFrames(f, func(fr *http2.Framer) error {
		return fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 7})
	}), 4)
	f.Add([]byte{0, 0, 0xff, 4, 0, 0, 0, 0, 0, 0, 3}, 2)
	f.Add([]byte{0xff, 0xff, 0xff, 3, 0, 0xff, 0xff, 0xff, 0xff}, 1)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		whole, split := &h2Frames{}, &h2Frames{}
		whole.follow(b)
		if cut < 0 || cut > len(b) {
			cut = len(b) / 2
		}
		split.follow(b[:cut])
		split.follow(b[cut:])
		a, s := whole.maxStreams(), split.maxStreams()
		if (a == nil) != (s == nil) || a != nil && *a != *s {
			t.Errorf("max streams %v at once, %v split at %d", a, s, cut)
		}
		if whole.goneAway() != split.goneAway() || len(whole.reset) != len(split.reset) {
			t.Errorf("goaway %v/%v, resets %d/%d", whole.goneAway(), split.goneAway(), len(whole.reset), len(split.reset))
		}
	})
}

// TestDoHPeerMaxStreams: a DoH session reports the concurrent-stream limit the server
// announced (net/http's HTTP/2 server, cleartext on loopback).
func TestDoHPeerMaxStreams(t *testing.T) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: http.NotFoundHandler(), Protocols: &p, HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 17}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	h, err := newH2Conn(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// A request: its answer comes after the server's SETTINGS.
	_, _, err = h.Exchange(t.Context(), &Request{Addr: AddrPortOf(ln.Addr())}, []byte{0}, func() {})
	if Classify(err) != StatusHTTPError {
		t.Fatalf("exchange: %s (%v), want http-error (404)", Classify(err), err)
	}
	if got := h.PeerMaxStreams(); got == nil || *got != 17 {
		t.Errorf("peer max streams %v, want 17", got)
	}
}
