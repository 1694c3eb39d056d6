package h2fast

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/doqscan/doqscan/internal/measure"
)

// h2Frame is what an h2Peer read from the client: a frame's type, stream and flags,
// its decoded header fields, a copy of its data, and its error code, increment or
// ping payload.
type h2Frame struct {
	typ     http2.FrameType
	stream  uint32
	flags   http2.Flags
	fields  []hpack.HeaderField
	data    []byte
	code    http2.ErrCode
	incr    uint32
	ping    [8]byte
	settles map[http2.SettingID]uint32
}

func (f h2Frame) field(name string) string {
	for _, hf := range f.fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// h2Peer is a scripted HTTP/2 server on loopback TCP for one h2Client: a goroutine
// reads the client's frames (after its preface) into frames; the test writes the
// server's frames with fr and enc.
type h2Peer struct {
	t      *testing.T
	conn   net.Conn
	frames chan h2Frame
	wmu    sync.Mutex
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
}

// newH2Pair connects an h2Client to a scripted peer that has sent its SETTINGS
// (settings) and read the client's preface.
func newH2Pair(t *testing.T, settings ...http2.Setting) (*h2Client, *h2Peer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc := <-accepted
	if sc == nil {
		t.Fatal("accept failed")
	}
	h, err := newH2Client(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	p := &h2Peer{t: t, conn: sc, frames: make(chan h2Frame, 256)}
	t.Cleanup(func() { _ = sc.Close() })
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(sc, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("client preface %q, %v", preface, err)
	}
	p.fr = http2.NewFramer(sc, sc)
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.hbuf)
	go p.read()
	p.write(func(fr *http2.Framer) error { return fr.WriteSettings(settings...) })
	return h, p
}

// read reads the client's frames until the connection ends.
func (p *h2Peer) read() {
	defer close(p.frames)
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return
		}
		r := h2Frame{typ: f.Header().Type, stream: f.Header().StreamID, flags: f.Header().Flags}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			r.fields = f.Fields
		case *http2.DataFrame:
			r.data = bytes.Clone(f.Data())
		case *http2.RSTStreamFrame:
			r.code = f.ErrCode
		case *http2.WindowUpdateFrame:
			r.incr = f.Increment
		case *http2.PingFrame:
			r.ping = f.Data
		case *http2.SettingsFrame:
			r.settles = map[http2.SettingID]uint32{}
			_ = f.ForeachSetting(func(s http2.Setting) error { r.settles[s.ID] = s.Val; return nil })
		}
		p.frames <- r
	}
}

func (p *h2Peer) write(fn func(*http2.Framer) error) {
	p.t.Helper()
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := fn(p.fr); err != nil {
		p.t.Errorf("peer write: %v", err)
	}
}

// next returns the client's next frame of type typ, skipping others (SETTINGS, window
// updates and acknowledgements unless asked for).
func (p *h2Peer) next(typ http2.FrameType) h2Frame {
	p.t.Helper()
	for f := range p.frames {
		if f.typ == typ {
			return f
		}
	}
	p.t.Fatalf("connection ended before a %v frame", typ)
	return h2Frame{}
}

// headers sends a header block of fields on stream id.
func (p *h2Peer) headers(id uint32, end bool, fields ...string) {
	p.t.Helper()
	p.write(func(fr *http2.Framer) error {
		p.hbuf.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			_ = p.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hbuf.Bytes(), EndStream: end, EndHeaders: true})
	})
}

func (p *h2Peer) data(id uint32, end bool, b []byte) {
	p.t.Helper()
	p.write(func(fr *http2.Framer) error { return fr.WriteData(id, end, b) })
}

// h2Result is what one exchange returned.
type h2Result struct {
	body []byte
	err  error
}

// start runs one exchange in the background.
func start(ctx context.Context, h *h2Client, post bool, msg []byte) <-chan h2Result {
	out := make(chan h2Result, 1)
	go func() {
		body, _, err := h.exchange(ctx, "resolver.example", "/dns-query", post, msg, func() {})
		out <- h2Result{body, err}
	}()
	return out
}

// TestH2RequestShape: a GET carries the query in dns= (base64url, RFC 8484 §4.1) on
// one HEADERS frame that ends the stream; a POST sends it as the one DATA frame with
// its media type and length.
func TestH2RequestShape(t *testing.T) {
	h, p := newH2Pair(t)
	msg := []byte("\x00\x00\x01\x00 a query")
	for _, post := range []bool{false, true} {
		res := start(context.Background(), h, post, msg)
		f := p.next(http2.FrameHeaders)
		if f.field(":scheme") != "https" || f.field(":authority") != "resolver.example" || f.field("accept") != measure.DoHMediaType {
			t.Errorf("post %v: header fields %v", post, f.fields)
		}
		if !post {
			want := "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(msg)
			if f.field(":method") != "GET" || f.field(":path") != want || !f.flags.Has(http2.FlagHeadersEndStream) {
				t.Errorf("GET: %v, flags %v", f.fields, f.flags)
			}
		} else {
			d := p.next(http2.FrameData)
			if f.field(":method") != "POST" || f.field(":path") != "/dns-query" || f.field("content-type") != measure.DoHMediaType ||
				f.field("content-length") != strconv.Itoa(len(msg)) || f.flags.Has(http2.FlagHeadersEndStream) {
				t.Errorf("POST: %v, flags %v", f.fields, f.flags)
			}
			if !bytes.Equal(d.data, msg) || d.stream != f.stream || !d.flags.Has(http2.FlagDataEndStream) {
				t.Errorf("POST body %q on stream %d (headers on %d), flags %v", d.data, d.stream, f.stream, d.flags)
			}
		}
		p.headers(f.stream, false, ":status", "200", "content-type", measure.DoHMediaType)
		p.data(f.stream, true, []byte("answer"))
		if r := <-res; r.err != nil || string(r.body) != "answer" {
			t.Errorf("post %v: %q %v", post, r.body, r.err)
		}
	}
}

// TestH2Responses: each kind of response ends its exchange with the body or the error
// class it deserves, and the client resets a stream it gives up on mid-response.
func TestH2Responses(t *testing.T) {
	for _, c := range []struct {
		name   string
		serve  func(p *h2Peer, id uint32)
		want   string // body; "" with wantErr
		status measure.Status
		reset  bool // the client sends RST_STREAM
	}{
		{name: "interim then final", serve: func(p *h2Peer, id uint32) {
			p.headers(id, false, ":status", "103", "link", "</x>")
			p.headers(id, false, ":status", "200")
			p.data(id, true, []byte("ok"))
		}, want: "ok", status: measure.StatusOK},
		{name: "trailers", serve: func(p *h2Peer, id uint32) {
			p.headers(id, false, ":status", "200")
			p.data(id, false, []byte("o"))
			p.data(id, false, []byte("k"))
			p.headers(id, true, "x-trailer", "1")
		}, want: "ok", status: measure.StatusOK},
		{name: "status 404", serve: func(p *h2Peer, id uint32) {
			p.headers(id, false, ":status", "404")
		}, status: measure.StatusHTTPError, reset: true},
		{name: "status 503 ended", serve: func(p *h2Peer, id uint32) {
			p.headers(id, true, ":status", "503")
		}, status: measure.StatusHTTPError},
		{name: "no status", serve: func(p *h2Peer, id uint32) {
			p.headers(id, false, "content-type", measure.DoHMediaType)
		}, status: measure.StatusBadResponse, reset: true},
		{name: "bad status", serve: func(p *h2Peer, id uint32) {
			p.headers(id, false, ":status", "2x0")
		}, status: measure.StatusBadResponse, reset: true},
		{name: "interim ends the stream", serve: func(p *h2Peer, id uint32) {
			p.headers(id, true, ":status", "100")
		}, status: measure.StatusBadResponse},
		{name: "data before headers", serve: func(p *h2Peer, id uint32) {
			p.data(id, false, []byte("x"))
		}, status: measure.StatusBadResponse, reset: true},
		{name: "trailers without end", serve: func(p *h2Peer, id uint32) {
			p.headers(id, false, ":status", "200")
			p.headers(id, false, "x-trailer", "1")
		}, status: measure.StatusBadResponse, reset: true},
		{name: "body too long", serve: func(p *h2Peer, id uint32) {
			p.headers(id, false, ":status", "200")
			chunk := make([]byte, 16000)
			for range 5 {
				p.data(id, false, chunk)
			}
		}, status: measure.StatusBadResponse, reset: true},
		{name: "server reset", serve: func(p *h2Peer, id uint32) {
			p.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, http2.ErrCodeInternal) })
		}, status: measure.StatusReset},
		{name: "goaway before the stream", serve: func(p *h2Peer, id uint32) {
			// The server processes streams up to id-1: not this one.
			p.write(func(fr *http2.Framer) error { return fr.WriteGoAway(id-1, http2.ErrCodeNo, nil) })
		}, status: measure.StatusReset},
		{name: "connection closed", serve: func(p *h2Peer, id uint32) {
			_ = p.conn.Close()
		}, status: measure.StatusReset},
		{name: "push promise", serve: func(p *h2Peer, id uint32) {
			p.hbuf.Reset()
			p.write(func(fr *http2.Framer) error {
				return fr.WritePushPromise(http2.PushPromiseParam{StreamID: id, PromiseID: 2, EndHeaders: true})
			})
		}, status: measure.StatusBadResponse},
		{name: "oversized header list", serve: func(p *h2Peer, id uint32) {
			p.headers(id, false, ":status", "200", "x-big", strings.Repeat("a", 9000), "x-big2", strings.Repeat("b", 9000))
		}, status: measure.StatusBadResponse},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, p := newH2Pair(t)
			res := start(context.Background(), h, false, []byte("query"))
			f := p.next(http2.FrameHeaders)
			c.serve(p, f.stream)
			r := <-res
			if got := measure.Classify(r.err); got != c.status || string(r.body) != c.want {
				t.Fatalf("body %q, status %s (%v); want %q, %s", r.body, got, r.err, c.want, c.status)
			}
			if c.reset {
				rst := p.next(http2.FrameRSTStream)
				if rst.stream != f.stream || rst.code != http2.ErrCodeCancel {
					t.Errorf("RST_STREAM on %d code %v, want %d CANCEL", rst.stream, rst.code, f.stream)
				}
			}
		})
	}
}

// TestH2GoAwayRefusesNewStreams: after GOAWAY the stream the server kept is answered,
// and a new request fails at once, classified as a reset.
func TestH2GoAwayRefusesNewStreams(t *testing.T) {
	h, p := newH2Pair(t)
	res := start(context.Background(), h, false, []byte("q"))
	f := p.next(http2.FrameHeaders)
	p.write(func(fr *http2.Framer) error { return fr.WriteGoAway(f.stream, http2.ErrCodeNo, []byte("bye")) })
	// A PING's acknowledgement shows the client read the GOAWAY before it.
	p.write(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{7}) })
	if ack := p.next(http2.FramePing); ack.ping != [8]byte{7} || !ack.flags.Has(http2.FlagPingAck) {
		t.Fatalf("ping ack %v flags %v", ack.ping, ack.flags)
	}
	if r := <-start(context.Background(), h, false, []byte("q2")); measure.Classify(r.err) != measure.StatusReset {
		t.Errorf("request after GOAWAY: %v", r.err)
	}
	p.headers(f.stream, false, ":status", "200")
	p.data(f.stream, true, []byte("kept"))
	if r := <-res; r.err != nil || string(r.body) != "kept" {
		t.Errorf("stream below GOAWAY's last: %q %v", r.body, r.err)
	}
}

// TestH2ConcurrencyLimit: with the server's SETTINGS_MAX_CONCURRENT_STREAMS at 1, four
// concurrent requests go out one at a time, each after the answer before it.
func TestH2ConcurrencyLimit(t *testing.T) {
	h, p := newH2Pair(t, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1})
	// The client's SETTINGS acknowledgement shows it applied the limit.
	for f := p.next(http2.FrameSettings); !f.flags.Has(http2.FlagSettingsAck); f = p.next(http2.FrameSettings) {
	}
	const n = 4
	var results []<-chan h2Result
	for i := range n {
		results = append(results, start(context.Background(), h, false, []byte{byte(i)}))
	}
	for range n {
		f := p.next(http2.FrameHeaders)
		// No other HEADERS may come before this stream is answered: a PING's
		// acknowledgement comes after anything the client wrote before it read the PING.
		p.write(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{1}) })
		for g := range p.frames {
			if g.typ == http2.FrameHeaders {
				t.Fatalf("stream %d opened while %d is open (limit 1)", g.stream, f.stream)
			}
			if g.typ == http2.FramePing {
				break
			}
		}
		p.headers(f.stream, false, ":status", "200")
		p.data(f.stream, true, []byte("a"))
	}
	for _, r := range results {
		if got := <-r; got.err != nil {
			t.Error(got.err)
		}
	}
}

// TestH2PostWaitsForWindow: a POST whose body the server's window (SETTINGS initial
// window 0) cannot take is not sent and ends with its context (a timeout); once the
// window opens, the next POST goes out.
func TestH2PostWaitsForWindow(t *testing.T) {
	h, p := newH2Pair(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	for f := p.next(http2.FrameSettings); !f.flags.Has(http2.FlagSettingsAck); f = p.next(http2.FrameSettings) {
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := <-start(ctx, h, true, []byte("body")); measure.Classify(r.err) != measure.StatusTimeout {
		t.Fatalf("POST into a closed window: %v", r.err)
	}
	p.write(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{2}) })
	for g := range p.frames {
		if g.typ == http2.FrameHeaders || g.typ == http2.FrameData {
			t.Fatalf("%v frame sent into a closed window", g.typ)
		}
		if g.typ == http2.FramePing {
			break
		}
	}
	res := start(context.Background(), h, true, []byte("body"))
	p.write(func(fr *http2.Framer) error {
		return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
	})
	f := p.next(http2.FrameHeaders)
	if d := p.next(http2.FrameData); string(d.data) != "body" {
		t.Errorf("body %q", d.data)
	}
	p.headers(f.stream, false, ":status", "200")
	p.data(f.stream, true, []byte("a"))
	if r := <-res; r.err != nil {
		t.Error(r.err)
	}
}

// TestH2ConnectionWindow: the client gives the connection's receive window back once
// half of it was used, so answers totalling more than the window keep coming.
func TestH2ConnectionWindow(t *testing.T) {
	h, p := newH2Pair(t)
	// The preface's update raises the connection window to measure.DoHReceiveBuffer.
	if f := p.next(http2.FrameWindowUpdate); f.stream != 0 || f.incr != measure.DoHReceiveBuffer-h2DefaultWindow {
		t.Fatalf("first WINDOW_UPDATE: stream %d incr %d", f.stream, f.incr)
	}
	body := bytes.Repeat([]byte("x"), 15000)
	total := 0
	for total < 2*measure.DoHReceiveBuffer {
		res := start(context.Background(), h, false, []byte("q"))
		f := p.next(http2.FrameHeaders)
		p.headers(f.stream, false, ":status", "200")
		for i := range 4 {
			p.data(f.stream, i == 3, body)
		}
		total += 4 * len(body)
		if r := <-res; r.err != nil || len(r.body) != 4*len(body) {
			t.Fatalf("%d bytes, %v", len(r.body), r.err)
		}
	}
	if f := p.next(http2.FrameWindowUpdate); f.stream != 0 || f.incr < measure.DoHReceiveBuffer/2 {
		t.Errorf("WINDOW_UPDATE stream %d incr %d", f.stream, f.incr)
	}
}

// TestH2CancelResets: a request whose context ends before its answer ends with the
// context's error and resets its stream; the connection serves the next request.
func TestH2CancelResets(t *testing.T) {
	h, p := newH2Pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	res := start(ctx, h, false, []byte("q"))
	f := p.next(http2.FrameHeaders)
	cancel()
	if r := <-res; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled request: %v", r.err)
	}
	if rst := p.next(http2.FrameRSTStream); rst.stream != f.stream || rst.code != http2.ErrCodeCancel {
		t.Errorf("RST_STREAM %d %v", rst.stream, rst.code)
	}
	res = start(context.Background(), h, false, []byte("q"))
	g := p.next(http2.FrameHeaders)
	p.headers(g.stream, false, ":status", "200")
	p.data(g.stream, true, []byte("a"))
	if r := <-res; r.err != nil || g.stream != f.stream+2 {
		t.Errorf("next request on stream %d: %v", g.stream, r.err)
	}
}

// FuzzH2Client: whatever bytes the server answers a request with (then closing the
// connection), the exchange returns an answer or an error, never panics, and takes no
// body over measure.DoHMaxBody.
func FuzzH2Client(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 10})
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, []byte("answer"))
	f.Add(seed.Bytes())
	_ = fr.WritePing(false, [8]byte{1})
	_ = fr.WriteGoAway(0, http2.ErrCodeProtocol, []byte("x"))
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		cc, sc := net.Pipe()
		go func() {
			defer sc.Close()
			pre := make([]byte, len(http2.ClientPreface))
			if _, err := io.ReadFull(sc, pre); err != nil {
				return
			}
			// Answer once the request's HEADERS arrived; keep reading what the
			// client writes (acknowledgements) so that it never blocks.
			fr := http2.NewFramer(nil, sc)
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					return
				}
				if f.Header().Type == http2.FrameHeaders {
					break
				}
			}
			go func() { _, _ = io.Copy(io.Discard, sc) }()
			_, _ = sc.Write(in)
		}()
		h, err := newH2Client(cc)
		if err != nil {
			return
		}
		defer h.close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body, _, err := h.exchange(ctx, "r.example", "/dns-query", len(in)%2 == 0, []byte("query"), func() {})
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("no end after the server closed the connection")
		}
		if err == nil && len(body) > measure.DoHMaxBody {
			t.Errorf("a %d-byte body accepted", len(body))
		}
	})
}
