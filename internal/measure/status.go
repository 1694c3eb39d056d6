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
	)
	switch {
	case errors.Is(err, dnsmsg.ErrBadResponse), errors.Is(err, errBadLength), errors.Is(err, errBadHTTP):
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
