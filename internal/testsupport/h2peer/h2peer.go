// Package h2peer is a scripted HTTP/2 server for tests of DoH clients: the test writes
// the server's frames one by one (malformed ones too) and reads what the client sent.
// Responses lists what a server may answer and the outcome each deserves; every DoH
// client over HTTP/2 (measure's x/net one, dnsbench's h2fast) is held to it.
package h2peer

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Frame is what the Peer read from the client: a frame's type, stream and flags, its
// decoded header fields, a copy of its data, and its error code, increment, ping
// payload or settings.
type Frame struct {
	Type     http2.FrameType
	Stream   uint32
	Flags    http2.Flags
	Fields   []hpack.HeaderField
	Data     []byte
	Code     http2.ErrCode
	Incr     uint32
	Ping     [8]byte
	Settings map[http2.SettingID]uint32
}

// Field is the value of header field name ("" if absent).
func (f Frame) Field(name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// Peer is the server side of one client connection: a goroutine reads the client's
// frames (after its preface) into Frames; the test writes with Write, Headers, Data.
type Peer struct {
	t      testing.TB
	Conn   net.Conn
	Frames chan Frame
	wmu    sync.Mutex
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
}

// Pair connects a client to a Peer over loopback TCP: start starts the client on its
// side of the connection (it writes the client preface), then the Peer reads the
// preface and sends its SETTINGS (settings).
func Pair(t testing.TB, start func(net.Conn), settings ...http2.Setting) *Peer {
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
	start(cc)
	p := &Peer{t: t, Conn: sc, Frames: make(chan Frame, 256)}
	t.Cleanup(func() { _ = sc.Close() })
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(sc, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("client preface %q, %v", preface, err)
	}
	p.fr = http2.NewFramer(sc, sc)
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.hbuf)
	go p.read()
	p.Write(func(fr *http2.Framer) error { return fr.WriteSettings(settings...) })
	return p
}

// read reads the client's frames until the connection ends.
func (p *Peer) read() {
	defer close(p.Frames)
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return
		}
		r := Frame{Type: f.Header().Type, Stream: f.Header().StreamID, Flags: f.Header().Flags}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			r.Fields = f.Fields
		case *http2.DataFrame:
			r.Data = bytes.Clone(f.Data())
		case *http2.RSTStreamFrame:
			r.Code = f.ErrCode
		case *http2.WindowUpdateFrame:
			r.Incr = f.Increment
		case *http2.PingFrame:
			r.Ping = f.Data
		case *http2.SettingsFrame:
			r.Settings = map[http2.SettingID]uint32{}
			_ = f.ForeachSetting(func(s http2.Setting) error { r.Settings[s.ID] = s.Val; return nil })
		}
		p.Frames <- r
	}
}

// Write writes with the Peer's framer.
func (p *Peer) Write(fn func(*http2.Framer) error) {
	p.t.Helper()
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := fn(p.fr); err != nil {
		p.t.Errorf("peer write: %v", err)
	}
}

// Next returns the client's next frame of type typ, skipping others (SETTINGS, window
// updates and acknowledgements unless asked for).
func (p *Peer) Next(typ http2.FrameType) Frame {
	p.t.Helper()
	for f := range p.Frames {
		if f.Type == typ {
			return f
		}
	}
	p.t.Fatalf("connection ended before a %v frame", typ)
	return Frame{}
}

// Headers sends a header block of fields (name, value, ...) on stream id.
func (p *Peer) Headers(id uint32, end bool, fields ...string) {
	p.t.Helper()
	p.Write(func(fr *http2.Framer) error {
		p.hbuf.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			_ = p.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hbuf.Bytes(), EndStream: end, EndHeaders: true})
	})
}

// Data sends a DATA frame on stream id.
func (p *Peer) Data(id uint32, end bool, b []byte) {
	p.t.Helper()
	p.Write(func(fr *http2.Framer) error { return fr.WriteData(id, end, b) })
}

// Case is one kind of response to a DoH request on stream id and the outcome it
// deserves: the body (Want), the measure status's name (Status: ok, http-error,
// bad-response, reset), and whether the client stops the stream itself (Stops: a
// RST_STREAM on it, or, where the client ends the whole connection over a connection
// error, its GOAWAY or close).
type Case struct {
	Name   string
	Serve  func(p *Peer, id uint32)
	Want   string
	Status string
	Stops  bool
}

// Responses are the kinds of response a DoH client over HTTP/2 must classify
// (docs/measure.md, "DoH over HTTP/2").
var Responses = []Case{
	{Name: "interim then final", Serve: func(p *Peer, id uint32) {
		p.Headers(id, false, ":status", "103", "link", "</x>")
		p.Headers(id, false, ":status", "200")
		p.Data(id, true, []byte("ok"))
	}, Want: "ok", Status: "ok"},
	{Name: "trailers", Serve: func(p *Peer, id uint32) {
		p.Headers(id, false, ":status", "200")
		p.Data(id, false, []byte("o"))
		p.Data(id, false, []byte("k"))
		p.Headers(id, true, "x-trailer", "1")
	}, Want: "ok", Status: "ok"},
	{Name: "status 404", Serve: func(p *Peer, id uint32) {
		p.Headers(id, false, ":status", "404")
	}, Status: "http-error", Stops: true},
	{Name: "status 503 ended", Serve: func(p *Peer, id uint32) {
		p.Headers(id, true, ":status", "503")
	}, Status: "http-error"},
	{Name: "no status", Serve: func(p *Peer, id uint32) {
		p.Headers(id, false, "content-type", "application/dns-message")
	}, Status: "bad-response", Stops: true},
	{Name: "bad status", Serve: func(p *Peer, id uint32) {
		p.Headers(id, false, ":status", "2x0")
	}, Status: "bad-response", Stops: true},
	{Name: "interim ends the stream", Serve: func(p *Peer, id uint32) {
		p.Headers(id, true, ":status", "100")
	}, Status: "bad-response"},
	{Name: "data before headers", Serve: func(p *Peer, id uint32) {
		p.Data(id, false, []byte("x"))
	}, Status: "bad-response", Stops: true},
	{Name: "trailers without end", Serve: func(p *Peer, id uint32) {
		p.Headers(id, false, ":status", "200")
		p.Headers(id, false, "x-trailer", "1")
	}, Status: "bad-response", Stops: true},
	{Name: "body too long", Serve: func(p *Peer, id uint32) {
		p.Headers(id, false, ":status", "200")
		chunk := make([]byte, 16000)
		for range 5 {
			p.Data(id, false, chunk)
		}
	}, Status: "bad-response", Stops: true},
	{Name: "server reset", Serve: func(p *Peer, id uint32) {
		p.Write(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, http2.ErrCodeInternal) })
	}, Status: "reset"},
	{Name: "goaway before the stream", Serve: func(p *Peer, id uint32) {
		// The server processes streams up to id-1: not this one.
		p.Write(func(fr *http2.Framer) error { return fr.WriteGoAway(id-1, http2.ErrCodeNo, nil) })
	}, Status: "reset"},
	{Name: "connection closed", Serve: func(p *Peer, id uint32) {
		_ = p.Conn.Close()
	}, Status: "reset"},
	{Name: "push promise", Serve: func(p *Peer, id uint32) {
		p.Write(func(fr *http2.Framer) error {
			return fr.WritePushPromise(http2.PushPromiseParam{StreamID: id, PromiseID: 2, EndHeaders: true})
		})
	}, Status: "bad-response"},
	{Name: "oversized header list", Serve: func(p *Peer, id uint32) {
		p.Headers(id, false, ":status", "200", "x-big", strings.Repeat("a", 9000), "x-big2", strings.Repeat("b", 9000))
	}, Status: "bad-response"},
}
