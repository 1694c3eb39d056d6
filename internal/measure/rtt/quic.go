package rtt

import (
	"crypto/rand"
	"errors"

	"github.com/doqscan/doqscan/internal/probe"
)

// vnProbeCIDLen is the length of the random connection IDs of an RTT probe: random, so a
// late reply to an earlier sample cannot be taken for this one's (RFC 9000 §17.2.1 echo).
const vnProbeCIDLen = 8

var errNotVN = errors.New("not a version negotiation packet for this probe")

// vnProbe returns zprobe's Version Negotiation probe (internal/probe: a 1200-byte
// Initial with a reserved version, RFC 9000 §6, §15) with random CIDs, and a check that
// accepts only a VN packet echoing them.
func vnProbe() ([]byte, func([]byte) error) {
	p := probe.DefaultQUICProbe()
	p.DCID, p.SCID = make([]byte, vnProbeCIDLen), make([]byte, vnProbeCIDLen)
	_, _ = rand.Read(p.DCID)
	_, _ = rand.Read(p.SCID)
	pkt, err := p.Build()
	if err != nil {
		panic("rtt: the default QUIC probe is invalid: " + err.Error()) // covered by tests
	}
	return pkt, func(r []byte) error {
		vn, err := probe.ParseVN(r)
		if err != nil || !vn.EchoesProbe(p) {
			return errNotVN
		}
		return nil
	}
}
