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

// An observation is what the exchanges of a check showed of a feature: Supported true or
// false only when they got far enough to show it, else nil (unknown); Detail says what
// was seen, whichever it is.
type observation struct {
	Supported *bool
	Detail    string
}

func supported(detail string) observation   { return observation{boolp(true), detail} }
func unsupported(detail string) observation { return observation{boolp(false), detail} }

// unknown is the observation of a check whose exchange (what) ended before it could show
// the feature.
func unknown(what string, res *measure.Result) observation {
	d := fmt.Sprintf("unknown: %s ended with status %s", what, res.Status)
	if res.Err != nil {
		d += " (" + res.Err.Error() + ")"
	}
	return observation{nil, d}
}

// rank orders observations of one feature: a positive one wins over a negative one,
// which wins over unknown.
func (o observation) rank() int {
	switch {
	case o.Supported == nil:
		return 0
	case !*o.Supported:
		return 1
	}
	return 2
}

// newTokenShown: did the server send a NEW_TOKEN frame on a fresh connection (warm)?
// No frame says "no" only once the exchange was answered: the server sends the frame
// when its handshake completes, before it answers.
func newTokenShown(warm *measure.Result) observation {
	switch {
	case isTrue(warm.TokenReceived):
		return supported("NEW_TOKEN frame on the warm-up connection")
	case warm.Status == measure.StatusOK && warm.TokenReceived != nil:
		return unsupported("no NEW_TOKEN frame on the warm-up connection (handshake completed, query answered)")
	}
	return unknown("the warm-up exchange", warm)
}

// retryShown: did the server answer a fresh connection's first Initial (warm, no token)
// with a Retry? Known once the handshake completed (measure.Result.RetrySeen).
func retryShown(warm *measure.Result) observation {
	switch {
	case warm.RetrySeen == nil:
		return unknown("the warm-up handshake", warm)
	case *warm.RetrySeen:
		return supported("Retry before the warm-up handshake completed")
	}
	return unsupported("the warm-up handshake completed without Retry")
}

// ticketShown: did the session of again resume the ticket of first (the first exchange
// answered, so its ticket, if the server sends one, had arrived)?
func ticketShown(first, again *measure.Result) observation {
	switch {
	case first.Status != measure.StatusOK:
		return unknown("the exchange that would get the ticket", first)
	case again.Status != measure.StatusOK || again.Resumed == nil:
		return unknown("the exchange that would resume it", again)
	case *again.Resumed:
		return supported("the second session resumed the first's ticket")
	}
	return unsupported("the second session did not resume the first's (full handshake)")
}

// zeroRTTShown: was the query of again, sent as early data on the session of first,
// accepted as such?
func zeroRTTShown(first, again *measure.Result) observation {
	switch {
	case first.Status != measure.StatusOK:
		return unknown("the exchange that would get the ticket", first)
	case again.Status != measure.StatusOK || again.Used0RTT == nil:
		return unknown("the exchange that sent early data", again)
	case *again.Used0RTT:
		return supported("the query went as early data on the resumed session and was accepted")
	case isTrue(again.Resumed):
		return unsupported("the session resumed but the server rejected the early data (query sent again in 1-RTT)")
	}
	return unsupported("no early data: the session did not resume (no ticket for it from the first connection)")
}

type featureSetter func(p measure.Protocol, port uint16, name string, o observation)

// checkFeatures runs the support checks the regular exchanges do not answer: TFO and
// edns-tcp-keepalive on DoTCP, session tickets on DoT, 0-RTT and tickets on DoQ. A check
// whose exchanges end before they show the feature records it as unknown.
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
			res := m.Measure(ctx, &ka)
			switch to := res.First().KeepaliveTimeout; {
			case res.Status != measure.StatusOK:
				set(ep.Protocol, ep.Port, FeatureTCPKeepalive, unknown("the query asking for it", res))
			case to >= 0:
				set(ep.Protocol, ep.Port, FeatureTCPKeepalive, supported(fmt.Sprintf("edns-tcp-keepalive option in the answer, timeout %d x 100 ms", to)))
			default:
				set(ep.Protocol, ep.Port, FeatureTCPKeepalive, unsupported("answer without an edns-tcp-keepalive option"))
			}
			// TFO: the first connection asks for a cookie, the second sends data in its SYN.
			fo := base
			fo.FastOpen = true
			first := m.Measure(ctx, &fo)
			if first.Status != measure.StatusOK {
				set(ep.Protocol, ep.Port, FeatureTFO, unknown("the connection that would get a cookie", first))
				continue
			}
			second := m.Measure(ctx, &fo)
			switch {
			case second.Status != measure.StatusOK || second.TFO == nil:
				set(ep.Protocol, ep.Port, FeatureTFO, unknown("the connection that would send data in its SYN", second))
			case *second.TFO:
				set(ep.Protocol, ep.Port, FeatureTFO, supported("the second connection's SYN carried the query and the server acknowledged it"))
			default:
				set(ep.Protocol, ep.Port, FeatureTFO, unsupported("the second connection's SYN data was not acknowledged (no cookie, or not accepted)"))
			}
		case measure.DoT, measure.DoQ:
			m, _ := measure.For(ep.Protocol)
			peer := measure.NewPeer()
			warm := base
			warm.Peer, warm.Mode = peer, measure.ModeResumed
			if ep.ALPN != "" {
				warm.ALPN = []string{ep.ALPN}
			}
			first := m.Measure(ctx, &warm)
			second := first // not answered: there is no ticket to try (ticketShown says so)
			if first.Status == measure.StatusOK {
				again := warm
				if ep.Protocol == measure.DoQ {
					again.Mode = measure.Mode0RTT
				}
				second = m.Measure(ctx, &again)
			}
			set(ep.Protocol, ep.Port, FeatureSessionTicket, ticketShown(first, second))
			if ep.Protocol == measure.DoQ {
				set(ep.Protocol, ep.Port, Feature0RTT, zeroRTTShown(first, second))
			}
		}
	}
}

func boolp(b bool) *bool { return &b }

func isTrue(b *bool) bool { return b != nil && *b }
