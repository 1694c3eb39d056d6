package measure_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/outcome"
)

// TestStatusTable: every status has a meaning, and representative real errors classify
// by their type (what Classify returned before the table existed); an error's text
// alone classifies nothing.
func TestStatusTable(t *testing.T) {
	if err := measure.Statuses.Check(); err != nil {
		t.Fatal(err)
	}
	op := func(op string, errno syscall.Errno) error {
		return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}
	}
	for _, c := range []struct {
		name string
		err  error
		want measure.Status
	}{
		{"nil", nil, measure.StatusOK},
		{"ECONNREFUSED", op("dial", syscall.ECONNREFUSED), measure.StatusConnRefused},
		{"ECONNRESET", op("read", syscall.ECONNRESET), measure.StatusReset},
		{"EHOSTUNREACH", op("dial", syscall.EHOSTUNREACH), measure.StatusNetwork},
		{"context deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), measure.StatusTimeout},
		{"quic handshake timeout", &quic.HandshakeTimeoutError{}, measure.StatusTimeout},
		{"quic idle timeout", &quic.IdleTimeoutError{}, measure.StatusTimeout},
		{"quic transport error", &quic.TransportError{ErrorCode: quic.ProtocolViolation, Remote: true}, measure.StatusQUICError},
		{"quic crypto error alert 120", &quic.TransportError{ErrorCode: 0x100 + 120, Remote: true}, measure.StatusALPNMismatch},
		{"quic crypto error alert 42", &quic.TransportError{ErrorCode: 0x100 + 42, Remote: true}, measure.StatusTLSError},
		{"quic stream reset", &quic.StreamError{ErrorCode: 2, Remote: true}, measure.StatusReset},
		{"quic version negotiation", &quic.VersionNegotiationError{}, measure.StatusQUICError},
		{"tls alert", fmt.Errorf("handshake: %w", tls.AlertError(40)), measure.StatusTLSError},
		{"tls alert 120", tls.AlertError(120), measure.StatusALPNMismatch},
		{"a carried status wins", outcome.Errorf(measure.StatusHTTPError, "status %d", 503), measure.StatusHTTPError},
		{"text alone", errors.New("read: connection reset by peer"), measure.StatusError},
	} {
		got := measure.Classify(c.err)
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if !measure.Statuses.Has(got) {
			t.Errorf("%s: %q is not in the table", c.name, got)
		}
	}
}
