package doq

import (
	"context"
	"errors"
	"time"

	"github.com/quic-go/quic-go"
)

// Step names the part of a stream exchange an error came from.
type Step string

// The steps of Exchange, in order.
const (
	StepOpen  Step = "open stream"
	StepWrite Step = "write query"
	StepClose Step = "close send side"
	StepRead  Step = "read reply"
)

// ExchangeError is an error of Exchange with the step it came from. It unwraps to the
// stream's or connection's error (quic-go's *StreamError, *ApplicationError, timeouts,
// ErrBadLength, ...), so callers classify it with errors.As / errors.Is.
type ExchangeError struct {
	Step Step
	Err  error
}

func (e *ExchangeError) Error() string { return string(e.Step) + ": " + e.Err.Error() }
func (e *ExchangeError) Unwrap() error { return e.Err }

// StepOf returns the step err came from, or "" when it is not an ExchangeError.
func StepOf(err error) Step {
	var e *ExchangeError
	if errors.As(err, &e) {
		return e.Step
	}
	return ""
}

// ExchangeOptions tunes Exchange; the zero value is fine.
type ExchangeOptions struct {
	// Limit bounds the reply read from the stream (prefix included); 0: one DNS message
	// and its prefix (MaxMessageSize+2).
	Limit int
	// OnSend, if set, runs once the stream is open, right before the query is written:
	// the place a caller takes the query's start time (or arms a packet log).
	OnSend func()
}

// Exchange is DoQ's query on one stream (RFC 9250 §4.2): it opens a new stream of conn,
// writes msg under framing f, closes the send side (the client MUST send the STREAM
// FIN after the query; the drafts say the same) and reads one reply up to the stream's
// end. msg must already carry Message ID 0 (RFC 9250 §4.2.1). The stream's deadline
// follows ctx: its deadline, and its cancellation at any time. A reply that breaks the
// framing cancels the read with DOQ_PROTOCOL_ERROR (§4.3), a read that fails otherwise
// with DOQ_REQUEST_CANCELLED. Errors are *ExchangeError naming the step.
//
// On a connection dialed for 0-RTT (quic.Transport.DialEarly) whose early data the
// server rejected, the query sent in 0-RTT is lost (RFC 9001 §4.6.2) and quic-go fails
// its stream with quic.Err0RTTRejected: Exchange then waits for the handshake
// (Conn.NextConnection) and sends the query once more on a new stream, framed for the
// ALPN the handshake negotiated. OnSend runs for
// the first send only, so a start time taken there includes the rejected attempt.
func Exchange(ctx context.Context, conn *quic.Conn, f Framing, msg []byte, o ExchangeOptions) ([]byte, error) {
	framed, err := Frame(f, msg)
	if err != nil {
		return nil, &ExchangeError{StepWrite, err}
	}
	reply, err := exchange(ctx, conn, f, framed, o)
	if !errors.Is(err, quic.Err0RTTRejected) {
		return reply, err
	}
	if _, err := conn.NextConnection(ctx); err != nil {
		return nil, &ExchangeError{StepOpen, err}
	}
	// A rejection may come with another application protocol than the resumed
	// session's (RFC 9001 §4.6.2): the query goes in the framing now negotiated.
	if nf, err := FramingFor(conn.ConnectionState().TLS.NegotiatedProtocol); err == nil && nf != f {
		f = nf
		if framed, err = Frame(f, msg); err != nil {
			return nil, &ExchangeError{StepWrite, err}
		}
	}
	o.OnSend = nil
	return exchange(ctx, conn, f, framed, o)
}

// exchange sends the framed query on a new stream of conn and reads the reply.
func exchange(ctx context.Context, conn *quic.Conn, f Framing, framed []byte, o ExchangeOptions) ([]byte, error) {
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, &ExchangeError{StepOpen, err}
	}
	if d, ok := ctx.Deadline(); ok {
		_ = str.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = str.SetDeadline(time.Now()) })
	defer stop()
	if o.OnSend != nil {
		o.OnSend()
	}
	if _, err := str.Write(framed); err != nil {
		str.CancelRead(CodeRequestCancelled)
		return nil, &ExchangeError{StepWrite, err}
	}
	if err := str.Close(); err != nil {
		str.CancelRead(CodeRequestCancelled)
		return nil, &ExchangeError{StepClose, err}
	}
	reply, err := ReadMessage(str, f, o.Limit)
	if err != nil {
		code := quic.StreamErrorCode(CodeRequestCancelled)
		if errors.Is(err, ErrBadLength) || errors.Is(err, ErrStreamTooLong) {
			code = CodeProtocolError
		}
		str.CancelRead(code)
		return nil, &ExchangeError{StepRead, err}
	}
	return reply, nil
}
