package measure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/http2"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/outcome"
)

// Status is the classification of an exchange, one of schema.sql measurements.status.
type Status string

const (
	StatusOK           Status = "ok"            // valid DNS response with an rcode
	StatusTimeout      Status = "timeout"       // no (complete) answer within the timeout
	StatusConnRefused  Status = "conn-refused"  // TCP RST / ICMP port unreachable
	StatusReset        Status = "reset"         // connection or stream reset mid-exchange
	StatusTLSError     Status = "tls-error"     // TLS alert, bad certificate, bad record
	StatusQUICError    Status = "quic-error"    // QUIC handshake or transport error
	StatusALPNMismatch Status = "alpn-mismatch" // no common ALPN (TLS alert 120)
	StatusHTTPError    Status = "http-error"    // DoH status other than 200
	StatusBadResponse  Status = "bad-response"  // malformed, wrong length, wrong ID
	StatusNetwork      Status = "network-error" // other socket errors
	StatusError        Status = "error"         // anything else
)

// Statuses is the table of measurement statuses, in report order.
var Statuses = outcome.Table[Status]{
	{Status: StatusOK, Meaning: "a valid DNS response with an rcode (rcode says which)"},
	{Status: StatusTimeout, Meaning: "no (complete) answer within the timeout"},
	{Status: StatusConnRefused, Meaning: "the port is closed: TCP RST to the SYN, or ICMP port unreachable"},
	{Status: StatusReset, Meaning: "the connection or stream was reset or closed mid-exchange"},
	{Status: StatusTLSError, Meaning: "TLS alert, bad certificate or bad record"},
	{Status: StatusQUICError, Meaning: "QUIC handshake or transport error, version negotiation failed, application close"},
	{Status: StatusALPNMismatch, Meaning: "no common ALPN (TLS alert 120, or the server chose another)"},
	{Status: StatusHTTPError, Meaning: "DoH answered with an HTTP status other than 200"},
	{Status: StatusBadResponse, Meaning: "malformed reply: wrong length, wrong ID, not a DNS message"},
	{Status: StatusNetwork, Meaning: "another socket error: host or network unreachable"},
	{Status: StatusError, Meaning: "anything else (a panic of the measurer: the detail says so)"},
}

// Errors the measurers wrap to classify.
var (
	errHTTPStatus  = errors.New("HTTP status")
	errBadLength   = errors.New("DNS message length disagrees with the stream")
	errClosedEarly = errors.New("connection closed before the response")
	errALPN        = errors.New("ALPN mismatch")
)

// The steps of an exchange a timeout can interrupt (TimeoutError.Step).
const (
	StepHandshake = "handshake" // TCP connect, TLS or QUIC handshake
	StepAnswer    = "answer"    // the query sent (or queued), its answer not complete
)

// TimeoutError is an exchange that ran out of time. Whatever the transport made of the
// deadline (the context's DeadlineExceeded, a socket's i/o timeout, quic-go's handshake
// or idle timeout, which the clients set to the exchange's timeout, the HTTP/3 stream
// quic-go cancels with H3_REQUEST_CANCELLED when the request's context ends), it is one
// failure: status timeout and one text per step. Err is what the transport said; it is
// kept for errors.Is/As, not in the text.
type TimeoutError struct {
	Step string // StepHandshake or StepAnswer
	Err  error
}

func (e *TimeoutError) Error() string { return "timeout: " + e.Step + " not complete" }
func (e *TimeoutError) Unwrap() error { return e.Err }

// Failure classifies err, which ended step of an exchange bounded by ctx. Once ctx is
// done the failure is the deadline's, whatever error the transport reported for it; a
// timeout of the transport's own (quic-go's idle timeout, a socket deadline) is the same
// failure. Both are a TimeoutError; any other error is classified as it is.
func Failure(ctx context.Context, step string, err error) (Status, error) {
	if err == nil {
		return StatusOK, nil
	}
	if _, ok := errors.AsType[*TimeoutError](err); ok {
		return StatusTimeout, err
	}
	if ctx.Err() != nil || Classify(err) == StatusTimeout {
		return StatusTimeout, &TimeoutError{Step: step, Err: err}
	}
	return Classify(err), err
}

// tlsAlertNoApplicationProtocol is TLS alert 120 (RFC 7301 §3.2).
const tlsAlertNoApplicationProtocol = 120

// quicCryptoErrorBase: TLS alerts are carried as QUIC CRYPTO_ERROR 0x0100+alert (RFC 9001 §4.8).
const quicCryptoErrorBase = 0x100

// Classify maps an error to a Status; nil is ok. A status the error carries
// (outcome.Error[Status]) wins; otherwise the error's type decides, never its text.
func Classify(err error) Status {
	if err == nil {
		return StatusOK
	}
	if s, ok := outcome.TryGet[Status](err); ok {
		return s
	}
	var (
		hsTimeout   *quic.HandshakeTimeoutError
		idleTimeout *quic.IdleTimeoutError
		transport   *quic.TransportError
		appErr      *quic.ApplicationError
		streamErr   *quic.StreamError
		vnErr       *quic.VersionNegotiationError
		alert       tls.AlertError
		recHdr      tls.RecordHeaderError
		certErr     *tls.CertificateVerificationError
		unknownAuth x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		netErr      net.Error
		h2Stream    http2.StreamError
		timeout     *TimeoutError
	)
	switch {
	case errors.As(err, &timeout):
		return StatusTimeout
	case errors.Is(err, dnsmsg.ErrBadResponse), errors.Is(err, errBadLength), errors.Is(err, errBadHTTP), errors.Is(err, errBadH3):
		return StatusBadResponse
	case errors.Is(err, errALPN):
		return StatusALPNMismatch
	case errors.Is(err, errHTTPStatus):
		return StatusHTTPError
	case errors.As(err, &hsTimeout), errors.As(err, &idleTimeout),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return StatusTimeout
	case errors.As(err, &transport):
		if transport.ErrorCode == quic.TransportErrorCode(quicCryptoErrorBase+tlsAlertNoApplicationProtocol) {
			return StatusALPNMismatch
		}
		if transport.ErrorCode.IsCryptoError() {
			return StatusTLSError
		}
		return StatusQUICError
	case errors.As(err, &streamErr), errors.As(err, &h2Stream), errors.Is(err, errGoAway):
		return StatusReset
	case errors.As(err, &appErr), errors.As(err, &vnErr):
		return StatusQUICError
	case errors.As(err, &alert):
		if alert == tlsAlertNoApplicationProtocol {
			return StatusALPNMismatch
		}
		return StatusTLSError
	case errors.As(err, &recHdr), errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr):
		return StatusTLSError
	case errors.Is(err, syscall.ECONNREFUSED):
		return StatusConnRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, errClosedEarly):
		return StatusReset
	case errors.Is(err, io.ErrUnexpectedEOF):
		return StatusBadResponse
	case errors.Is(err, io.EOF):
		return StatusReset
	case errors.As(err, &netErr) && netErr.Timeout():
		return StatusTimeout
	case errors.As(err, &netErr), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return StatusNetwork
	case errors.Is(err, context.Canceled):
		return StatusError
	}
	return StatusError
}
