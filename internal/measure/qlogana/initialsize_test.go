package qlogana_test

import (
	"testing"

	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// TestStallWithPaddedInitials: a quic-go server with the 7-certificate chain (the
// testbed's doq-bigchain-ignore, 80 ms path) and a client padding its one X25519 Initial
// to 1,200 and to 1,350 bytes. The server sends while its bytes are under 3x ours, so its
// first flight ends one datagram past the budget (3,840 and 5,120 bytes against 3,600
// and 4,050), then waits an RTT for our ACK: an amplification stall both times. Before
// the budget allowed that last datagram, both were explained as "unknown".
func TestStallWithPaddedInitials(t *testing.T) {
	for _, c := range []struct {
		file         string
		client, sent int
	}{
		{"testdata/amplification-initial1200.sqlog", 1200, 3840},
		{"testdata/amplification-initial1350.sqlog", 1350, 5120},
	} {
		a, err := qlogana.Analyze(read(t, c.file), qlogana.Options{RTTNS: 80e6})
		if err != nil {
			t.Fatal(err)
		}
		if !a.AmplificationStall || a.Cause != qlogana.CauseAmplification || a.ClientInitialBytes != c.client || a.ServerBytesPreAck != c.sent {
			t.Errorf("%s: stall %v cause %s client %d server %d round trips %d; want a stall, client %d, server %d",
				c.file, a.AmplificationStall, a.Cause, a.ClientInitialBytes, a.ServerBytesPreAck, a.RoundTrips, c.client, c.sent)
		}
	}
}
