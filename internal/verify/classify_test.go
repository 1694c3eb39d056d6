package verify

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/outcome"
)

// TestOutcomeTable: every outcome has a meaning, and Classify maps representative real
// handshake errors by their type; text alone classifies nothing.
func TestOutcomeTable(t *testing.T) {
	if err := Outcomes.Check(); err != nil {
		t.Fatal(err)
	}
	op := func(errno syscall.Errno) error {
		return &net.OpError{Op: "read", Net: "udp", Err: os.NewSyscallError("recvmsg", errno)}
	}
	for _, c := range []struct {
		name string
		err  error
		want Outcome
	}{
		{"ECONNREFUSED", op(syscall.ECONNREFUSED), OutcomeUnreachable},
		{"EHOSTUNREACH", op(syscall.EHOSTUNREACH), OutcomeUnreachable},
		{"context deadline", context.DeadlineExceeded, OutcomeTimeout},
		{"quic handshake timeout", &quic.HandshakeTimeoutError{}, OutcomeTimeout},
		{"version negotiation", &quic.VersionNegotiationError{}, OutcomeVersionMismatch},
		{"alert 120", &quic.TransportError{ErrorCode: 0x100 + 120, Remote: true}, OutcomeQUICNotDoQ},
		{"alert 112", &quic.TransportError{ErrorCode: 0x100 + 112, Remote: true}, OutcomeTLSError},
		{"transport error", &quic.TransportError{ErrorCode: quic.ConnectionRefused, Remote: true}, OutcomeProtocolError},
		{"stateless reset", &quic.StatelessResetError{}, OutcomeProtocolError},
		{"a carried class wins", outcome.Errorf(OutcomeSNIRequired, "no name worked"), OutcomeSNIRequired},
		{"text alone", errors.New("connection refused"), OutcomeProtocolError},
	} {
		got := Classify(c.err)
		if got != c.want || !Outcomes.Has(got) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
