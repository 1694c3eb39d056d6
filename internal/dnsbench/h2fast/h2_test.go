package h2fast

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testsupport/h2peer"
)

// newH2Pair connects an h2Client to a scripted peer that has sent its SETTINGS
// (settings) and read the client's preface.
func newH2Pair(t *testing.T, settings ...http2.Setting) (*h2Client, *h2peer.Peer) {
	t.Helper()
	var h *h2Client
	p := h2peer.Pair(t, func(cc net.Conn) {
		var err error
		if h, err = newH2Client(cc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.close)
	}, settings...)
	return h, p
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
		f := p.Next(http2.FrameHeaders)
		if f.Field(":scheme") != "https" || f.Field(":authority") != "resolver.example" || f.Field("accept") != measure.DoHMediaType {
			t.Errorf("post %v: header fields %v", post, f.Fields)
		}
		if !post {
			want := "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(msg)
			if f.Field(":method") != "GET" || f.Field(":path") != want || !f.Flags.Has(http2.FlagHeadersEndStream) {
				t.Errorf("GET: %v, flags %v", f.Fields, f.Flags)
			}
		} else {
			d := p.Next(http2.FrameData)
			if f.Field(":method") != "POST" || f.Field(":path") != "/dns-query" || f.Field("content-type") != measure.DoHMediaType ||
				f.Field("content-length") != strconv.Itoa(len(msg)) || f.Flags.Has(http2.FlagHeadersEndStream) {
				t.Errorf("POST: %v, flags %v", f.Fields, f.Flags)
			}
			if !bytes.Equal(d.Data, msg) || d.Stream != f.Stream || !d.Flags.Has(http2.FlagDataEndStream) {
				t.Errorf("POST body %q on stream %d (headers on %d), flags %v", d.Data, d.Stream, f.Stream, d.Flags)
			}
		}
		p.Headers(f.Stream, false, ":status", "200", "content-type", measure.DoHMediaType)
		p.Data(f.Stream, true, []byte("answer"))
		if r := <-res; r.err != nil || string(r.body) != "answer" {
			t.Errorf("post %v: %q %v", post, r.body, r.err)
		}
	}
}

// TestH2Responses: each kind of response (h2peer.Responses) ends its exchange with the
// body or the error class it deserves, and the client resets (CANCEL) a stream it gives
// up on mid-response.
func TestH2Responses(t *testing.T) {
	for _, c := range h2peer.Responses {
		t.Run(c.Name, func(t *testing.T) {
			h, p := newH2Pair(t)
			res := start(context.Background(), h, false, []byte("query"))
			f := p.Next(http2.FrameHeaders)
			c.Serve(p, f.Stream)
			r := <-res
			if got := measure.Classify(r.err); string(got) != c.Status || string(r.body) != c.Want {
				t.Fatalf("body %q, status %s (%v); want %q, %s", r.body, got, r.err, c.Want, c.Status)
			}
			if c.Stops {
				rst := p.Next(http2.FrameRSTStream)
				if rst.Stream != f.Stream || rst.Code != http2.ErrCodeCancel {
					t.Errorf("RST_STREAM on %d code %v, want %d CANCEL", rst.Stream, rst.Code, f.Stream)
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
	f := p.Next(http2.FrameHeaders)
	p.Write(func(fr *http2.Framer) error { return fr.WriteGoAway(f.Stream, http2.ErrCodeNo, []byte("bye")) })
	// A PING's acknowledgement shows the client read the GOAWAY before it.
	p.Write(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{7}) })
	if ack := p.Next(http2.FramePing); ack.Ping != [8]byte{7} || !ack.Flags.Has(http2.FlagPingAck) {
		t.Fatalf("ping ack %v flags %v", ack.Ping, ack.Flags)
	}
	if r := <-start(context.Background(), h, false, []byte("q2")); measure.Classify(r.err) != measure.StatusReset {
		t.Errorf("request after GOAWAY: %v", r.err)
	}
	p.Headers(f.Stream, false, ":status", "200")
	p.Data(f.Stream, true, []byte("kept"))
	if r := <-res; r.err != nil || string(r.body) != "kept" {
		t.Errorf("stream below GOAWAY's last: %q %v", r.body, r.err)
	}
}

// TestH2ConcurrencyLimit: with the server's SETTINGS_MAX_CONCURRENT_STREAMS at 1, four
// concurrent requests go out one at a time, each after the answer before it.
func TestH2ConcurrencyLimit(t *testing.T) {
	h, p := newH2Pair(t, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1})
	// The client's SETTINGS acknowledgement shows it applied the limit.
	for f := p.Next(http2.FrameSettings); !f.Flags.Has(http2.FlagSettingsAck); f = p.Next(http2.FrameSettings) {
	}
	const n = 4
	var results []<-chan h2Result
	for i := range n {
		results = append(results, start(context.Background(), h, false, []byte{byte(i)}))
	}
	for range n {
		f := p.Next(http2.FrameHeaders)
		// No other HEADERS may come before this stream is answered: a PING's
		// acknowledgement comes after anything the client wrote before it read the PING.
		p.Write(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{1}) })
		for g := range p.Frames {
			if g.Type == http2.FrameHeaders {
				t.Fatalf("stream %d opened while %d is open (limit 1)", g.Stream, f.Stream)
			}
			if g.Type == http2.FramePing {
				break
			}
		}
		p.Headers(f.Stream, false, ":status", "200")
		p.Data(f.Stream, true, []byte("a"))
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
	for f := p.Next(http2.FrameSettings); !f.Flags.Has(http2.FlagSettingsAck); f = p.Next(http2.FrameSettings) {
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if r := <-start(ctx, h, true, []byte("body")); measure.Classify(r.err) != measure.StatusTimeout {
		t.Fatalf("POST into a closed window: %v", r.err)
	}
	p.Write(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{2}) })
	for g := range p.Frames {
		if g.Type == http2.FrameHeaders || g.Type == http2.FrameData {
			t.Fatalf("%v frame sent into a closed window", g.Type)
		}
		if g.Type == http2.FramePing {
			break
		}
	}
	res := start(context.Background(), h, true, []byte("body"))
	p.Write(func(fr *http2.Framer) error {
		return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
	})
	f := p.Next(http2.FrameHeaders)
	if d := p.Next(http2.FrameData); string(d.Data) != "body" {
		t.Errorf("body %q", d.Data)
	}
	p.Headers(f.Stream, false, ":status", "200")
	p.Data(f.Stream, true, []byte("a"))
	if r := <-res; r.err != nil {
		t.Error(r.err)
	}
}

// TestH2ConnectionWindow: the client gives the connection's receive window back once
// half of it was used, so answers totalling more than the window keep coming.
func TestH2ConnectionWindow(t *testing.T) {
	h, p := newH2Pair(t)
	// The preface's update raises the connection window to measure.DoHReceiveBuffer.
	if f := p.Next(http2.FrameWindowUpdate); f.Stream != 0 || f.Incr != measure.DoHReceiveBuffer-h2DefaultWindow {
		t.Fatalf("first WINDOW_UPDATE: stream %d incr %d", f.Stream, f.Incr)
	}
	body := bytes.Repeat([]byte("x"), 15000)
	total := 0
	for total < 2*measure.DoHReceiveBuffer {
		res := start(context.Background(), h, false, []byte("q"))
		f := p.Next(http2.FrameHeaders)
		p.Headers(f.Stream, false, ":status", "200")
		for i := range 4 {
			p.Data(f.Stream, i == 3, body)
		}
		total += 4 * len(body)
		if r := <-res; r.err != nil || len(r.body) != 4*len(body) {
			t.Fatalf("%d bytes, %v", len(r.body), r.err)
		}
	}
	if f := p.Next(http2.FrameWindowUpdate); f.Stream != 0 || f.Incr < measure.DoHReceiveBuffer/2 {
		t.Errorf("WINDOW_UPDATE stream %d incr %d", f.Stream, f.Incr)
	}
}

// TestH2CancelResets: a request whose context ends before its answer ends with the
// context's error and resets its stream; the connection serves the next request.
func TestH2CancelResets(t *testing.T) {
	h, p := newH2Pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	res := start(ctx, h, false, []byte("q"))
	f := p.Next(http2.FrameHeaders)
	cancel()
	if r := <-res; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled request: %v", r.err)
	}
	if rst := p.Next(http2.FrameRSTStream); rst.Stream != f.Stream || rst.Code != http2.ErrCodeCancel {
		t.Errorf("RST_STREAM %d %v", rst.Stream, rst.Code)
	}
	res = start(context.Background(), h, false, []byte("q"))
	g := p.Next(http2.FrameHeaders)
	p.Headers(g.Stream, false, ":status", "200")
	p.Data(g.Stream, true, []byte("a"))
	if r := <-res; r.err != nil || g.Stream != f.Stream+2 {
		t.Errorf("next request on stream %d: %v", g.Stream, r.err)
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
