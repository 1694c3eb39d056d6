package measure

import (
	"net"
	"net/netip"
	"time"

	"github.com/doqscan/doqscan/internal/kstamp"
)

// SetFinishPhases sets the hook that receives the steps of finishing a QUIC exchange;
// the returned function puts the previous one back.
func SetFinishPhases(f func(res *Result, began time.Time, closing, qlogWait, analysis time.Duration)) (restore func()) {
	old := finishPhases
	finishPhases = f
	return func() { finishPhases = old }
}

// SetListenPacket makes req open its DoQ/DoH3 socket with wrap around the kernel-stamped
// socket the measurement opens and its log (tests: watch or hold back what the client
// reads).
func SetListenPacket(req *Request, wrap func(net.PacketConn, *kstamp.Log) net.PacketConn) {
	req.listenPacket = func(a netip.AddrPort) (net.PacketConn, *kstamp.Log, error) {
		pc, log, err := listenStamped(a)
		if err != nil {
			return nil, nil, err
		}
		return wrap(pc, log), log, nil
	}
}
