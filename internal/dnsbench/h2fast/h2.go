// Package h2fast is dnsbench's own HTTP/2 client for DoH: one buffered writer whose last
// waiting request flushes (a burst of requests is one write), one reader goroutine for
// every stream, built on x/net's frame codec and HPACK. It costs a third less CPU per
// answer than x/net's ClientConn, which runs a goroutine per request and flushes once per
// request. It exists for the load generator only: the hourly measurement (package
// measure) runs x/net's client, what real Go clients use; measure.Load(DoH, ..., Start)
// runs measure's DoH timing and classification on this one.
package h2fast

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/outcome"
)

// HTTP/2 limits of the DoH client (RFC 9113 §6.5.2 and §6.9.2 defaults).
const (
	h2DefaultWindow     = 65535 // initial flow-control window, stream and connection
	h2DefaultFrameSize  = 16384 // SETTINGS_MAX_FRAME_SIZE until the peer says more
	h2DefaultTableSize  = 4096  // SETTINGS_HEADER_TABLE_SIZE (HPACK dynamic table)
	h2InitialMaxStreams = 100   // concurrent streams assumed before the peer's SETTINGS
	h2MaxStreamID       = 1<<31 - 1
)

// The client's errors carry their measure.Status (outcome.Error), as measure's own
// clients' do.
var (
	// errBadHTTP is an HTTP/2 response the client cannot take: no or a malformed
	// :status, DATA before the response header, headers over the limit, trailers without
	// the stream's end, or a connection error of the protocol (a frame of the wrong size
	// or place, a compression error, a push the client disabled).
	errBadHTTP = outcome.Errorf(measure.StatusBadResponse, "malformed HTTP/2 response")
	// errGoAway ends the streams a server's GOAWAY left out, and every request after it.
	errGoAway = outcome.Errorf(measure.StatusReset, "http2: server sent GOAWAY")
	// errBadLength is a body longer than a DNS message, or a query over one frame.
	errBadLength = outcome.Errorf(measure.StatusBadResponse, "DNS message length disagrees with the stream")
	// errClosedEarly is the connection's end before the response.
	errClosedEarly = outcome.Errorf(measure.StatusReset, "connection closed before the response")
	// errHTTPStatus is a final :status other than 200.
	errHTTPStatus = outcome.Errorf(measure.StatusHTTPError, "HTTP status")
)

// h2Client is the DoH client connection over HTTP/2 (RFC 9113): requests are HEADERS
// (and for POST one DATA) frames written through one buffered writer, answers are read
// by one goroutine and handed to the waiting query. It is built on x/net's frame codec
// and HPACK, and does only what DoH needs: no server push, request bodies of one frame,
// responses bounded by measure.DoHMaxBody and measure.DoHMaxHeaderBytes. Concurrent requests that find
// the writer busy leave their frames to be flushed by the last one (one write and one
// TLS record for a burst of requests); the receive windows are given back in batches.
type h2Client struct {
	conn net.Conn
	fr   *http2.Framer
	bw   *bufio.Writer

	// writers counts the goroutines writing or waiting for wmu: the last one flushes.
	writers atomic.Int32
	wmu     sync.Mutex // bw, fr's writes, henc, hbuf, nextID
	henc    *hpack.Encoder
	hbuf    bytes.Buffer
	nextID  uint32

	mu         sync.Mutex
	streams    map[uint32]*h2Stream
	opening    int   // requests admitted by acquire that open has not registered yet
	refuse     error // set: no new streams (GOAWAY, or the connection ended)
	maxStreams uint32
	peerWindow uint32        // the peer's SETTINGS_INITIAL_WINDOW_SIZE (a new stream's send window)
	sendWindow int64         // the connection's send window (POST bodies)
	unacked    uint32        // received DATA not yet given back with WINDOW_UPDATE
	waiting    int           // requests waiting for a stream slot or send window
	changed    chan struct{} // closed (and replaced) when a waiting request may go on

	// maxStreamsSet: the server's SETTINGS named SETTINGS_MAX_CONCURRENT_STREAMS.
	maxStreamsSet bool

	readDone chan struct{}
}

// h2Stream is one request's stream: the response as it arrives, and its end.
type h2Stream struct {
	status int // final :status; 0 until the response header
	body   []byte
	err    error
	at     time.Time     // when the last DATA (END_STREAM) was read
	done   chan struct{} // closed when the stream ended (err or complete)
}

// newH2Client starts an HTTP/2 client connection on conn (TLS with ALPN h2 done): the
// client preface and SETTINGS (no push, our receive windows and header limit) are sent
// at once, and a goroutine reads the peer's frames until close.
func newH2Client(conn net.Conn) (*h2Client, error) {
	bw := bufio.NewWriterSize(conn, 16<<10)
	fr := http2.NewFramer(bw, bufio.NewReaderSize(conn, 16<<10))
	fr.ReadMetaHeaders = hpack.NewDecoder(h2DefaultTableSize, nil)
	fr.MaxHeaderListSize = measure.DoHMaxHeaderBytes
	fr.SetMaxReadFrameSize(h2DefaultFrameSize)
	fr.SetReuseFrames()
	h := &h2Client{
		conn: conn, fr: fr, bw: bw, nextID: 1,
		streams: make(map[uint32]*h2Stream), maxStreams: h2InitialMaxStreams,
		peerWindow: h2DefaultWindow, sendWindow: h2DefaultWindow,
		changed: make(chan struct{}), readDone: make(chan struct{}),
	}
	h.henc = hpack.NewEncoder(&h.hbuf)
	if _, err := bw.WriteString(http2.ClientPreface); err != nil {
		return nil, err
	}
	err := fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: measure.DoHReceiveBuffer},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: measure.DoHMaxHeaderBytes},
	)
	if err == nil {
		err = fr.WriteWindowUpdate(0, measure.DoHReceiveBuffer-h2DefaultWindow)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("http2 preface: %w", err)
	}
	go h.readLoop()
	return h, nil
}

// Start starts a client connection on conn (TLS with ALPN h2 done): the h2 of
// measure.Load.
func Start(conn net.Conn) (measure.HTTP2Conn, error) { return newH2Client(conn) }

// Exchange sends msg as req's DoH request (measure.HTTP2Conn).
func (h *h2Client) Exchange(ctx context.Context, req *measure.Request, msg []byte, sending func()) ([]byte, time.Time, error) {
	authority, path := measure.DoHTarget(req)
	return h.exchange(ctx, authority, path, req.IsPOST(), msg, sending)
}

// PeerMaxStreams is the server's SETTINGS_MAX_CONCURRENT_STREAMS, nil if it sent none.
func (h *h2Client) PeerMaxStreams() *uint32 { return h.peerMaxStreams() }

// Close ends the connection and waits for its reader.
func (h *h2Client) Close() { h.close() }

// close ends the connection and waits for its reader.
func (h *h2Client) close() {
	_ = h.conn.Close()
	<-h.readDone
}

// exchange sends msg as a DoH request (RFC 8484 §4.1: GET with dns=base64url, or POST
// when post is set) for authority and path, and returns the response body and when its
// last frame was read. sending is called just before the request's frames are written
// (under the write lock, so in the order requests go out).
func (h *h2Client) exchange(ctx context.Context, authority, path string, post bool, msg []byte, sending func()) ([]byte, time.Time, error) {
	if post && len(msg) > h2DefaultFrameSize {
		return nil, time.Time{}, fmt.Errorf("%w: a %d-byte query is over one frame", errBadLength, len(msg))
	}
	need := int64(0)
	if post {
		need = int64(len(msg))
	}
	if err := h.acquire(ctx, need); err != nil {
		return nil, time.Time{}, err
	}
	method := "GET"
	if post {
		method = "POST"
	} else {
		path += "?dns=" + base64.RawURLEncoding.EncodeToString(msg)
	}
	st := &h2Stream{done: make(chan struct{})}
	h.writers.Add(1)
	h.wmu.Lock()
	id, err := h.open(st)
	if err != nil {
		_ = h.flush(nil) // the frames of writers before us may wait for this flush
		h.wmu.Unlock()
		return nil, time.Time{}, err
	}
	h.hbuf.Reset()
	h.field(":method", method, false)
	h.field(":scheme", "https", false)
	h.field(":authority", authority, false)
	h.field(":path", path, !post) // GET paths differ per query: not indexed
	h.field("accept", measure.DoHMediaType, false)
	if post {
		h.field("content-type", measure.DoHMediaType, false)
		h.field("content-length", strconv.Itoa(len(msg)), false)
	}
	sending()
	err = h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndStream: !post, EndHeaders: true})
	if err == nil && post {
		err = h.fr.WriteData(id, true, msg)
	}
	err = h.flush(err)
	h.wmu.Unlock()
	if err != nil {
		return nil, time.Time{}, err
	}
	select {
	case <-st.done:
	case <-ctx.Done():
		if h.end(id, st, ctx.Err()) {
			h.reset(id, http2.ErrCodeCancel)
		}
		<-st.done
	}
	if st.err != nil {
		return nil, time.Time{}, st.err
	}
	return st.body, st.at, nil
}

// field adds one header field to the block being built (wmu held).
func (h *h2Client) field(name, value string, sensitive bool) {
	_ = h.henc.WriteField(hpack.HeaderField{Name: name, Value: value, Sensitive: sensitive})
}

// acquire waits until a new stream is allowed (the peer's concurrent stream limit, with
// the streams admitted but not yet opened) and, for a body of need bytes, the send
// windows hold it, which it then takes.
func (h *h2Client) acquire(ctx context.Context, need int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		if h.refuse != nil {
			return h.refuse
		}
		if uint32(len(h.streams)+h.opening) < h.maxStreams && need <= h.sendWindow && need <= int64(h.peerWindow) {
			h.sendWindow -= need
			h.opening++ // the slot is held until open registers the stream
			return nil
		}
		ch := h.changed
		h.waiting++
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		h.mu.Lock()
		h.waiting--
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// open gives st the next stream ID and registers it in the slot acquire held (wmu held:
// IDs go out in order).
func (h *h2Client) open(st *h2Stream) (uint32, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opening--
	if h.refuse != nil {
		h.wake()
		return 0, h.refuse
	}
	if h.nextID > h2MaxStreamID {
		h.refuse = fmt.Errorf("http2: stream IDs exhausted: %w", errClosedEarly)
		return 0, h.refuse
	}
	id := h.nextID
	h.nextID += 2
	h.streams[id] = st
	return id, nil
}

// flush ends a write (wmu held): the last writer waiting flushes the buffer; a write
// error ends the connection.
func (h *h2Client) flush(err error) error {
	if h.writers.Add(-1) == 0 && err == nil {
		err = h.bw.Flush()
	}
	if err != nil {
		err = fmt.Errorf("http2 write: %w", err)
		h.fail(err)
	}
	return err
}

// write writes the frames fn writes (the reader's acknowledgements and updates).
func (h *h2Client) write(fn func(*http2.Framer) error) {
	h.writers.Add(1)
	h.wmu.Lock()
	_ = h.flush(fn(h.fr))
	h.wmu.Unlock()
}

// reset sends RST_STREAM for id.
func (h *h2Client) reset(id uint32, code http2.ErrCode) {
	h.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, code) })
}

// end ends stream id (st) with err unless it has ended; it reports whether it did.
func (h *h2Client) end(id uint32, st *h2Stream, err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams[id] != st {
		return false
	}
	h.finish(id, st, err)
	return true
}

// finish ends stream id with err (nil: complete), (mu held).
func (h *h2Client) finish(id uint32, st *h2Stream, err error) {
	delete(h.streams, id)
	st.err = err
	if err == nil {
		st.at = time.Now()
	}
	close(st.done)
	h.wake()
}

// wake lets the waiting requests look again (mu held).
func (h *h2Client) wake() {
	if h.waiting > 0 {
		close(h.changed)
		h.changed = make(chan struct{})
	}
}

// fail ends the connection for every stream with err.
func (h *h2Client) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refuse = err
	for id, st := range h.streams {
		h.finish(id, st, err)
	}
	h.wake()
}

// readLoop reads the peer's frames until the connection ends.
func (h *h2Client) readLoop() {
	defer close(h.readDone)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// A malformed response header of one stream: the connection goes on.
				h.streamError(se.StreamID, fmt.Errorf("%w: %w", errBadHTTP, se), se.Code)
				continue
			}
			err = readError(err)
		} else {
			err = h.handle(f)
		}
		if err != nil {
			h.fail(err)
			_ = h.conn.Close()
			return
		}
	}
}

// readError is the error a failed frame read ends the connection with.
func readError(err error) error {
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ce), errors.Is(err, http2.ErrFrameTooLarge):
		return fmt.Errorf("%w: %w", errBadHTTP, err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("http2 read: %w", errClosedEarly)
	}
	return fmt.Errorf("http2 read: %w", err)
}

// handle takes one frame; an error ends the connection.
func (h *h2Client) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		h.onHeaders(f)
	case *http2.DataFrame:
		h.onData(f)
	case *http2.RSTStreamFrame:
		h.mu.Lock()
		if st := h.streams[f.StreamID]; st != nil {
			h.finish(f.StreamID, st, http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode})
		}
		h.mu.Unlock()
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return h.onSettings(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			data := f.Data
			h.write(func(fr *http2.Framer) error { return fr.WritePing(true, data) })
		}
	case *http2.GoAwayFrame:
		h.onGoAway(f)
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			h.mu.Lock()
			h.sendWindow += int64(f.Increment)
			over := h.sendWindow > h2MaxStreamID
			h.wake()
			h.mu.Unlock()
			if over {
				return fmt.Errorf("%w: %w", errBadHTTP, http2.ConnectionError(http2.ErrCodeFlowControl))
			}
		}
	case *http2.PushPromiseFrame:
		return fmt.Errorf("%w: PUSH_PROMISE with push disabled", errBadHTTP)
	}
	return nil
}

// onHeaders takes a response header (or trailer) block.
func (h *h2Client) onHeaders(f *http2.MetaHeadersFrame) {
	id := f.StreamID
	h.mu.Lock()
	st := h.streams[id]
	if st == nil {
		h.mu.Unlock()
		return // a stream we ended: the block was decoded to keep HPACK in step
	}
	var err error
	complete := false
	switch {
	case f.Truncated:
		err = fmt.Errorf("%w: header list over %d bytes", errBadHTTP, measure.DoHMaxHeaderBytes)
	case st.status != 0: // trailers
		if !f.StreamEnded() {
			err = fmt.Errorf("%w: trailers without END_STREAM", errBadHTTP)
		}
		complete = err == nil
	default:
		s := f.PseudoValue("status")
		code, perr := strconv.Atoi(s)
		switch {
		case perr != nil || len(s) != 3 || code < 100:
			err = fmt.Errorf("%w: :status %q", errBadHTTP, s)
		case code < 200: // interim (RFC 9110 §15.2): the final response follows
			if f.StreamEnded() {
				err = fmt.Errorf("%w: interim status %d ends the stream", errBadHTTP, code)
			}
		case code != 200:
			err = fmt.Errorf("%w %d", errHTTPStatus, code)
		default:
			st.status = code
			complete = f.StreamEnded()
		}
	}
	if err != nil || complete {
		h.finish(id, st, err)
	}
	h.mu.Unlock()
	if err != nil && !f.StreamEnded() {
		h.reset(id, http2.ErrCodeCancel)
	}
}

// onData takes a DATA frame: every byte counts against the connection's receive window,
// which is given back once half of it is used; the stream's own window (measure.DoHReceiveBuffer)
// outlasts the largest body it takes (measure.DoHMaxBody).
func (h *h2Client) onData(f *http2.DataFrame) {
	id := f.StreamID
	h.mu.Lock()
	h.unacked += f.Length
	var update uint32
	if h.unacked >= measure.DoHReceiveBuffer/2 {
		update, h.unacked = h.unacked, 0
	}
	var err error
	rst := false
	if st := h.streams[id]; st != nil {
		data := f.Data()
		switch {
		case st.status == 0:
			err = fmt.Errorf("%w: DATA before the response header", errBadHTTP)
		case len(st.body)+len(data) > measure.DoHMaxBody:
			err = fmt.Errorf("%w: DoH body longer than %d bytes", errBadLength, measure.DoHMaxBody)
		default:
			st.body = append(st.body, data...)
		}
		if err != nil || f.StreamEnded() {
			h.finish(id, st, err)
			rst = err != nil && !f.StreamEnded()
		}
	}
	h.mu.Unlock()
	if update > 0 || rst {
		h.write(func(fr *http2.Framer) error {
			if rst {
				if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
					return err
				}
			}
			if update > 0 {
				return fr.WriteWindowUpdate(0, update)
			}
			return nil
		})
	}
}

// streamError ends stream id with err after a stream error the frame reader found.
func (h *h2Client) streamError(id uint32, err error, code http2.ErrCode) {
	h.mu.Lock()
	if st := h.streams[id]; st != nil {
		h.finish(id, st, err)
	}
	h.mu.Unlock()
	h.reset(id, code)
}

// peerMaxStreams is the server's SETTINGS_MAX_CONCURRENT_STREAMS, nil if it sent none.
func (h *h2Client) peerMaxStreams() *uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.maxStreamsSet {
		return nil
	}
	v := h.maxStreams
	return &v
}

// onSettings applies the peer's SETTINGS and acknowledges them.
func (h *h2Client) onSettings(f *http2.SettingsFrame) error {
	var table uint32
	tableSet := false
	h.mu.Lock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			h.maxStreams, h.maxStreamsSet = s.Val, true
		case http2.SettingInitialWindowSize:
			h.peerWindow = s.Val
		case http2.SettingHeaderTableSize:
			table, tableSet = s.Val, true
		}
		return nil
	})
	h.wake()
	h.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: SETTINGS: %w", errBadHTTP, err)
	}
	h.write(func(fr *http2.Framer) error {
		if tableSet {
			h.henc.SetMaxDynamicTableSizeLimit(table)
		}
		return fr.WriteSettingsAck()
	})
	return nil
}

// onGoAway ends the streams the peer will not process and refuses new ones.
func (h *h2Client) onGoAway(f *http2.GoAwayFrame) {
	err := fmt.Errorf("%w: last stream %d, %v, debug %q", errGoAway, f.LastStreamID, f.ErrCode, f.DebugData())
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refuse = err
	for id, st := range h.streams {
		if id > f.LastStreamID {
			h.finish(id, st, err)
		}
	}
	h.wake()
}
