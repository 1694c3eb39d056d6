package verify

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// TestHandshakeUnreachable: every ICMP and ICMPv6 destination-unreachable, as the errno
// Linux maps it to, is the unreachable outcome (ICMPv6 "administratively prohibited"
// arrives as EACCES where ICMP's "filtered" arrives as EHOSTUNREACH).
func TestHandshakeUnreachable(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.EACCES} {
		err := fmt.Errorf("handshake: %w", os.NewSyscallError("recvmsg", errno))
		if got, _ := classifyHandshake(err); got != OutcomeUnreachable {
			t.Errorf("%v: %s, want %s", errno, got, OutcomeUnreachable)
		}
	}
}
