package verify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/outcome"
)

// Outcome is the class of one verified target (verification_results.outcome). Every
// target gets exactly one.
type Outcome string

// Outcome classes. 'unreachable' is wider than measure's conn-refused: it also holds
// host and network unreachable (measure: network-error).
const (
	OutcomeVerified        Outcome = "doq-verified"
	OutcomeRefused         Outcome = "doq-refused"
	OutcomeDNSError        Outcome = "doq-dns-error"
	OutcomeQUICNotDoQ      Outcome = "quic-not-doq"
	OutcomeDoQNoALPN       Outcome = "doq-no-alpn"
	OutcomeVersionMismatch Outcome = "version-mismatch"
	OutcomeSNIRequired     Outcome = "sni-required"
	OutcomeTimeout         Outcome = "timeout"
	OutcomeTLSError        Outcome = "tls-error"
	OutcomeProtocolError   Outcome = "protocol-error"
	OutcomeUnreachable     Outcome = "unreachable"
	OutcomeError           Outcome = "error"
)

// Outcomes is the table of classes, in the order summaries print them.
var Outcomes = outcome.Table[Outcome]{
	{Status: OutcomeVerified, Meaning: "DoQ ALPN negotiated and a valid DNS answer with NOERROR or NXDOMAIN"},
	{Status: OutcomeRefused, Meaning: "DoQ handshake ok, the answer is REFUSED"},
	{Status: OutcomeDNSError, Meaning: "DoQ handshake ok, a well-formed reply with another rcode (SERVFAIL, ...)"},
	{Status: OutcomeQUICNotDoQ, Meaning: "QUIC, but none of our DoQ ALPNs accepted (no_application_protocol)"},
	{Status: OutcomeDoQNoALPN, Meaning: "every DoQ ALPN refused (no_application_protocol), but a handshake offering no ALPN completed and a DNS query over it (RFC 9250 framing) got a well-formed reply (any rcode)"},
	{Status: OutcomeVersionMismatch, Meaning: "no common QUIC version (the server's list is in the detail)"},
	{Status: OutcomeSNIRequired, Meaning: "refused without a server name, and no name we tried worked"},
	{Status: OutcomeTimeout, Meaning: "no complete handshake within the timeout, or no reply within the query timeout"},
	{Status: OutcomeTLSError, Meaning: "another TLS alert or certificate/handshake failure"},
	{Status: OutcomeProtocolError, Meaning: "QUIC transport error, stateless reset, application close, or RFC 9250 framing violated"},
	{Status: OutcomeUnreachable, Meaning: "ICMP port, host or network unreachable (connection refused)"},
	{Status: OutcomeError, Meaning: "the verifier itself failed on this target (a recovered panic; the stack is in the log)"},
}

// Classify maps an error of dialing (QUIC + TLS handshake) to its outcome: a class the
// error carries (outcome.Error[Outcome]) wins, otherwise its type decides, never its
// text. classifyHandshake also gives the detail.
func Classify(err error) Outcome {
	o, _ := classifyHandshake(err)
	return o
}

// TLS alerts (RFC 8446 §6) that matter here; QUIC carries them as CRYPTO_ERROR
// 0x100+alert (RFC 9001 §4.8).
const (
	cryptoErrorBase         = 0x100
	alertHandshakeFailure   = 40  // RFC 8446 §6.2
	alertInternalError      = 80  // RFC 8446 §6.2
	alertCertificateReq     = 116 // RFC 8446 §6.2: certificate_required
	alertUnrecognizedName   = 112 // RFC 6066 §3: unrecognized_name
	alertNoApplicationProto = 120 // RFC 7301 §3.2: no_application_protocol
)

// tlsAlert returns the TLS alert carried by a QUIC CRYPTO_ERROR, if err is one.
func tlsAlert(err error) (alert uint8, remote, ok bool) {
	var te *quic.TransportError
	if errors.As(err, &te) && te.ErrorCode >= cryptoErrorBase && te.ErrorCode < cryptoErrorBase+0x100 {
		return uint8(te.ErrorCode - cryptoErrorBase), te.Remote, true
	}
	return 0, false, false
}

// suggestsSNI says whether a failed handshake without SNI is worth retrying with a
// server name: the server said unrecognized_name, or failed the handshake with a
// generic alert (handshake_failure, internal_error: what Go, OpenSSL and rustls send
// when no certificate or config matches an empty name), or it failed after the server
// had already shown a certificate (so its SANs are candidates). no_application_protocol
// is not a signal: a server that rejects every DoQ ALPN is quic-not-doq.
func suggestsSNI(err error, certSeen bool) bool {
	alert, _, ok := tlsAlert(err)
	if !ok {
		return false
	}
	switch alert {
	case alertUnrecognizedName, alertHandshakeFailure, alertInternalError:
		return true
	case alertNoApplicationProto:
		return false
	}
	return certSeen
}

func alertName(a uint8) string {
	return fmt.Sprintf("%s (alert %d)", tls.AlertError(a).Error(), a)
}

// classifyHandshake maps an error from dialing (QUIC + TLS handshake) to an outcome and
// a detail string.
func classifyHandshake(err error) (Outcome, string) {
	if o, ok := outcome.TryGet[Outcome](err); ok {
		return o, err.Error()
	}
	var (
		vn  *quic.VersionNegotiationError
		hto *quic.HandshakeTimeoutError
		ito *quic.IdleTimeoutError
		te  *quic.TransportError
		ae  *quic.ApplicationError
		sr  *quic.StatelessResetError
		ne  net.Error
	)
	switch {
	case errors.As(err, &vn):
		return OutcomeVersionMismatch, fmt.Sprintf("server offers %s, we speak %s", fmtVersions(vn.Theirs), fmtVersions(vn.Ours))
	case errors.Is(err, syscall.ECONNREFUSED):
		return OutcomeUnreachable, "connection refused (ICMP port unreachable)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EACCES):
		// EACCES: Linux's mapping of an ICMPv6 "administratively prohibited" unreachable
		// (ICMP's "filtered" arrives as EHOSTUNREACH).
		return OutcomeUnreachable, err.Error()
	case errors.As(err, &hto), errors.As(err, &ito), errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return OutcomeTimeout, "handshake: " + err.Error()
	case errors.As(err, &te):
		if alert, remote, ok := tlsAlert(err); ok {
			who := "server"
			if !remote {
				who = "client"
			}
			d := fmt.Sprintf("%s sent %s", who, alertName(alert))
			if msg := te.ErrorMessage; msg != "" {
				d += ": " + msg
			}
			if alert == alertNoApplicationProto {
				return OutcomeQUICNotDoQ, "no DoQ ALPN accepted: " + d
			}
			return OutcomeTLSError, d
		}
		return OutcomeProtocolError, "transport error: " + err.Error()
	case errors.As(err, &ae):
		return OutcomeProtocolError, "application close during handshake: " + err.Error()
	case errors.As(err, &sr):
		return OutcomeProtocolError, "stateless reset during handshake"
	case errors.As(err, &ne) && ne.Timeout():
		return OutcomeTimeout, "handshake: " + err.Error()
	}
	return OutcomeProtocolError, err.Error()
}

// classifyQuery maps an error of the DNS exchange on an established DoQ connection.
// queryFailure classifies a failed DoQ exchange after a completed handshake: no reply
// within the query timeout is a timeout (the host accepted and stalled); anything else
// (stream reset, connection closed, a length prefix the stream disagrees with, a stream
// longer than any DNS message) violates RFC 9250 §4.2/§4.3.3 and is a protocol error.
func queryFailure(err error) Outcome {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return OutcomeTimeout
	}
	return OutcomeProtocolError
}

func classifyQuery(err error) string {
	var (
		se *quic.StreamError
		ae *quic.ApplicationError
		ne net.Error
	)
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("stream reset by server, code %#x (%s)", uint64(se.ErrorCode), doqCodeName(uint64(se.ErrorCode)))
	case errors.As(err, &ae):
		return fmt.Sprintf("connection closed by server, code %#x (%s)", uint64(ae.ErrorCode), doqCodeName(uint64(ae.ErrorCode)))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "no reply: " + err.Error()
	}
	return err.Error()
}

func doqCodeName(c uint64) string {
	switch c {
	case doq.CodeNoError:
		return "DOQ_NO_ERROR"
	case doq.CodeInternalError:
		return "DOQ_INTERNAL_ERROR"
	case doq.CodeProtocolError:
		return "DOQ_PROTOCOL_ERROR"
	case doq.CodeRequestCancelled:
		return "DOQ_REQUEST_CANCELLED"
	case doq.CodeExcessiveLoad:
		return "DOQ_EXCESSIVE_LOAD"
	case doq.CodeUnspecifiedError:
		return "DOQ_UNSPECIFIED_ERROR"
	}
	return "unknown"
}

func fmtVersions(vs []quic.Version) string {
	s := "["
	for i, v := range vs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%#x", uint32(v))
	}
	return s + "]"
}
