package measure

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// alpnH2 is HTTP/2 over TLS (RFC 9113 §3.2): the protocol table's ALPN.
var alpnH2 = DoH.Spec().DefaultALPN()

// errBadHTTP is an HTTP/2 response the client refused: x/net's verdict on what the
// server sent (a malformed or missing :status, a header list over the limit, a frame
// of the wrong size or place, a compression error, a push the client disabled).
var errBadHTTP = errors.New("malformed HTTP/2 response")

// errGoAway is a request the server's GOAWAY (or its closing the connection) ended.
var errGoAway = errors.New("http2: server sent GOAWAY or closed the connection")

// measureDoH is DNS over HTTPS (RFC 8484) over HTTP/2 and TLS: handshake = TCP + TLS
// (2 RTT with TLS 1.3), GET or POST per Request.Variant, on x/net's HTTP/2 client
// connection over the TLS connection we dial (and time) ourselves.
func measureDoH(ctx context.Context, req *Request, res *Result, c *client) *Result {
	if c.h2 != nil {
		return dohOver(ctx, req, res, c, c.h2)
	}
	return dohOver(ctx, req, res, c, newH2Conn)
}

// HTTP2Conn is one DoH session's HTTP/2 client connection, started on an established
// TLS connection (ALPN h2).
type HTTP2Conn interface {
	// Exchange sends msg as req's DoH request (RFC 8484 §4.1: GET or POST per
	// req.Variant, to DoHTarget(req)) and returns the response body and when its last
	// packet was read (zero: when Exchange returned). sending is called right before
	// the request's first write. Its errors are classified by Classify (an error may
	// carry its Status, outcome.Error).
	Exchange(ctx context.Context, req *Request, msg []byte, sending func()) (body []byte, at time.Time, err error)
	// PeerMaxStreams is the server's SETTINGS_MAX_CONCURRENT_STREAMS, nil if it named
	// none (Result.PeerMaxStreams).
	PeerMaxStreams() *uint32
	Close()
}

func dohOver[C HTTP2Conn](ctx context.Context, req *Request, res *Result, cl *client, start func(net.Conn) (C, error)) *Result {
	return overTLS(ctx, req, res, []string{alpnH2}, func(c *timedConn, tc *tls.Conn) *Result {
		if res.ALPN != alpnH2 {
			return res.fail(ctx, fmt.Errorf("%w: server chose ALPN %q, want h2", errALPN, res.ALPN))
		}
		h, err := start(tc)
		if err != nil {
			return res.fail(ctx, err)
		}
		defer h.Close()
		res.Queries = cl.drive(ctx, dohSession(req, func(ctx context.Context, msg []byte, sending func()) ([]byte, time.Time, error) {
			return h.Exchange(ctx, req, msg, sending)
		}, c.log))
		res.PeerMaxStreams = h.PeerMaxStreams()
		return res.finish()
	})
}

// h2Transport is the x/net HTTP/2 transport of every DoH connection, with the bounds
// of dohcommon.go (x/net takes its receive windows only from an http.Transport).
//
// x/net v0.60 marks its client deprecated in favour of net/http's (Go 1.26:
// http.Transport.NewClientConn, the same code bundled). That one's HTTP/2 errors are
// unexported types, so a reset by the server and a response the client refused could
// only be told apart by their text; x/net's are exported (StreamError, ConnectionError,
// GoAwayError) and classify by type.
var h2Transport = sync.OnceValues(func() (*http2.Transport, error) { //nolint:staticcheck // SA1019: see above: x/net's exported error types
	return http2.ConfigureTransports(&http.Transport{ //nolint:staticcheck // SA1019: as h2Transport
		MaxResponseHeaderBytes: DoHMaxHeaderBytes,
		HTTP2:                  &http.HTTP2Config{MaxReceiveBufferPerConnection: DoHReceiveBuffer, MaxReceiveBufferPerStream: DoHReceiveBuffer},
	})
})

// h2Conn is one DoH session's HTTP/2 client connection: x/net's, with a passive record
// of the frames the server sent (h2Frames) to classify x/net's errors by what happened.
type h2Conn struct {
	cc     *http2.ClientConn //nolint:staticcheck // SA1019: as h2Transport
	frames *h2Frames
}

// newH2Conn starts x/net's HTTP/2 client connection on conn (TLS with ALPN h2 done, or
// cleartext HTTP/2 in tests): it writes the client preface and SETTINGS at once.
func newH2Conn(conn net.Conn) (*h2Conn, error) {
	tr, err := h2Transport()
	if err != nil {
		return nil, fmt.Errorf("http2 transport: %w", err)
	}
	fr := &h2Frames{Conn: conn}
	cc, err := tr.NewClientConn(fr) //nolint:staticcheck // SA1019: as h2Transport; net/http's replacement dials by itself
	if err != nil {
		return nil, fmt.Errorf("http2 client: %w", err)
	}
	return &h2Conn{cc: cc, frames: fr}, nil
}

// Close ends the connection.
func (h *h2Conn) Close() { _ = h.cc.Close() }

// PeerMaxStreams is the server's SETTINGS_MAX_CONCURRENT_STREAMS (see h2Frames).
func (h *h2Conn) PeerMaxStreams() *uint32 { return h.frames.maxStreams() }

// Exchange sends one DoH request on the connection. The request has a context of its
// own, cancelled once its answer was read to the end and before its body is closed:
// x/net's Close then returns at once (the stream is closed on both sides, so nothing
// is sent) instead of waiting for the request's goroutine to finish.
func (h *h2Conn) Exchange(ctx context.Context, req *Request, msg []byte, sending func()) ([]byte, time.Time, error) {
	rctx, end := context.WithCancel(ctx)
	defer end()
	hr, err := dohRequest(rctx, req, msg)
	if err != nil {
		return nil, time.Time{}, err
	}
	sending()
	resp, err := h.cc.RoundTrip(hr)
	if err != nil {
		return nil, time.Time{}, h.error(ctx, err)
	}
	body, err := dohResponse(resp, end)
	return body, time.Time{}, h.error(ctx, err)
}

// error classifies an error of x/net's client met by a request under ctx by what the
// server sent: a reset of its stream (RST_STREAM) or a GOAWAY, or the connection's
// end, is a reset; an error x/net made of the server's frames (a StreamError it made
// itself, a ConnectionError, a frame over the size it allows, a header list over its
// limit) is a bad response. Errors once ctx is done are left to failure (a timeout).
func (h *h2Conn) error(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	var (
		se   http2.StreamError
		ce   http2.ConnectionError
		away http2.GoAwayError //nolint:staticcheck // SA1019: as h2Transport
	)
	switch {
	case errors.As(err, &se):
		if h.frames.resetByPeer(se.StreamID) {
			return err
		}
		return fmt.Errorf("%w: %w", errBadHTTP, err)
	case errors.As(err, &away):
		return fmt.Errorf("%w: %w", errGoAway, err)
	case errors.As(err, &ce), errors.Is(err, http2.ErrFrameTooLarge):
		return fmt.Errorf("%w: %w", errBadHTTP, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		// x/net's word for the connection closed under a request (RFC 9113 §5.4.1:
		// the server's TCP FIN), whether read by the response or the body.
		return fmt.Errorf("%w: %w", errClosedEarly, err)
	case Classify(err) == StatusError:
		// An error without a type: the connection was already going away or closed when
		// the request came (a GOAWAY, the server's reset of the connection), or x/net
		// refused the response.
		if h.frames.goneAway() || h.cc.State().Closed {
			return fmt.Errorf("%w: %w", errGoAway, err)
		}
		return fmt.Errorf("%w: %w", errBadHTTP, err)
	}
	return err
}

// HTTP/2 frame types the record keeps (RFC 9113 §6).
const (
	h2FrameRSTStream = 0x3
	h2FrameSettings  = 0x4
	h2FrameGoAway    = 0x7
	h2FlagACK        = 0x1
	h2HeaderLen      = 9
	h2SettingsMaxLen = 6 * 16 // the record keeps this much of a SETTINGS payload
)

// h2Frames wraps the connection under x/net's client and follows the server's frames
// as they are read (headers only; SETTINGS payloads up to h2SettingsMaxLen), to tell
// afterwards what the server did: which streams it reset, whether it sent GOAWAY, and
// the SETTINGS_MAX_CONCURRENT_STREAMS of its first SETTINGS (RFC 9113 §6.5.2), which
// x/net does not say (it reports its default when the server named none). It parses
// nothing x/net acts on: x/net reads the same bytes and does the protocol.
type h2Frames struct {
	net.Conn

	mu      sync.Mutex
	hdr     [h2HeaderLen]byte
	hdrLen  int
	left    int    // payload bytes of the current frame still to pass
	typ     byte   // the current frame's type
	flags   byte   // its flags
	payload []byte // the current SETTINGS frame's payload so far (first SETTINGS only)

	settingsSeen bool
	max          *uint32
	reset        map[uint32]bool
	goAway       bool
}

func (f *h2Frames) Read(p []byte) (int, error) {
	n, err := f.Conn.Read(p)
	if n > 0 {
		f.follow(p[:n])
	}
	return n, err
}

// follow advances the record over b, the next bytes the server sent.
func (f *h2Frames) follow(b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(b) > 0 {
		if f.hdrLen < h2HeaderLen {
			k := copy(f.hdr[f.hdrLen:], b)
			f.hdrLen += k
			b = b[k:]
			if f.hdrLen < h2HeaderLen {
				return
			}
			f.left = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
			f.typ, f.flags = f.hdr[3], f.hdr[4]
			id := (uint32(f.hdr[5])<<24 | uint32(f.hdr[6])<<16 | uint32(f.hdr[7])<<8 | uint32(f.hdr[8])) & (1<<31 - 1)
			switch f.typ {
			case h2FrameRSTStream:
				if f.reset == nil {
					f.reset = map[uint32]bool{}
				}
				f.reset[id] = true
			case h2FrameGoAway:
				f.goAway = true
			case h2FrameSettings:
				if f.flags&h2FlagACK == 0 && !f.settingsSeen {
					f.payload = make([]byte, 0, min(f.left, h2SettingsMaxLen))
				}
			}
		}
		k := min(f.left, len(b))
		if f.payload != nil && len(f.payload) < cap(f.payload) {
			f.payload = append(f.payload, b[:min(k, cap(f.payload)-len(f.payload))]...)
		}
		f.left -= k
		b = b[k:]
		if f.left == 0 {
			f.endFrame()
		}
	}
}

// endFrame closes the current frame: the first SETTINGS gives the stream limit.
func (f *h2Frames) endFrame() {
	if f.payload != nil {
		f.settingsSeen = true
		for s := f.payload; len(s) >= 6; s = s[6:] {
			if id := uint16(s[0])<<8 | uint16(s[1]); id == uint16(http2.SettingMaxConcurrentStreams) {
				v := uint32(s[2])<<24 | uint32(s[3])<<16 | uint32(s[4])<<8 | uint32(s[5])
				f.max = &v
			}
		}
		f.payload = nil
	}
	f.hdrLen = 0
}

// maxStreams is the server's SETTINGS_MAX_CONCURRENT_STREAMS, nil when its first
// SETTINGS named none (or none was read).
func (f *h2Frames) maxStreams() *uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.max
}

func (f *h2Frames) resetByPeer(id uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reset[id]
}

func (f *h2Frames) goneAway() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.goAway
}
