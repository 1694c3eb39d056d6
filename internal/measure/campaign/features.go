package campaign

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/doqscan/doqscan/internal/measure"
)

// Feature names, as in schema.sql resolver_features.feature.
const (
	FeatureTFO           = "tfo"                // RFC 7413
	FeatureTCPKeepalive  = "edns-tcp-keepalive" // RFC 7828
	Feature0RTT          = "0rtt"               // RFC 9001 §4.6.1
	FeatureSessionTicket = "session-ticket"     // RFC 8446 §4.6.1
	FeatureNewToken      = "new-token"          // RFC 9000 §19.7
	FeatureRetry         = "retry"              // RFC 9000 §17.2.5
)

type featureSetter func(p measure.Protocol, port uint16, name string, v *bool, detail string)

// checkFeatures runs the support checks the regular exchanges do not answer: TFO and
// edns-tcp-keepalive on DoTCP, session tickets on DoT, 0-RTT and tickets on DoQ.
func (r *runner) checkFeatures(ctx context.Context, t Target, set featureSetter) {
	for _, ep := range t.Endpoints {
		if ctx.Err() != nil {
			return
		}
		addr := netip.AddrPortFrom(t.Addr, ep.Port)
		base := measure.Request{Addr: addr, ServerName: t.ServerName, Name: r.cfg.Name, Timeout: r.cfg.Timeout,
			KeyShare: measure.KeyShareX25519}
		switch ep.Protocol {
		case measure.DoTCP:
			m, _ := measure.For(measure.DoTCP)
			ka := base
			ka.TCPKeepalive = true
			if res := m.Measure(ctx, &ka); res.Status == measure.StatusOK {
				to := res.First().KeepaliveTimeout
				set(ep.Protocol, ep.Port, FeatureTCPKeepalive, boolp(to >= 0), fmt.Sprintf("timeout %d (100 ms units; -1: absent)", to))
			}
			// TFO: the first connection asks for a cookie, the second sends data in its SYN.
			fo := base
			fo.FastOpen = true
			var res *measure.Result
			for i := 0; i < 2; i++ {
				res = m.Measure(ctx, &fo)
			}
			if res.Status == measure.StatusOK && res.TFO != nil {
				set(ep.Protocol, ep.Port, FeatureTFO, res.TFO, "second SYN carried data the server acknowledged")
			}
		case measure.DoT, measure.DoQ:
			m, _ := measure.For(ep.Protocol)
			peer := measure.NewPeer()
			warm := base
			warm.Peer, warm.Mode = peer, measure.ModeResumed
			if ep.ALPN != "" {
				warm.ALPN = []string{ep.ALPN}
			}
			if res := m.Measure(ctx, &warm); res.Status != measure.StatusOK {
				continue
			}
			again := warm
			if ep.Protocol == measure.DoQ {
				again.Mode = measure.Mode0RTT
			}
			res := m.Measure(ctx, &again)
			if res.Status != measure.StatusOK {
				continue
			}
			set(ep.Protocol, ep.Port, FeatureSessionTicket, res.Resumed, "second session resumed the first's ticket")
			if ep.Protocol == measure.DoQ {
				set(ep.Protocol, ep.Port, Feature0RTT, res.Used0RTT, "early data accepted on the resumed connection")
			}
		}
	}
}

func boolp(b bool) *bool { return &b }
