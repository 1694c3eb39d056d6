package conncheck

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
)

// checkDoQ: the counting connection (its transport parameters, Retry, NEW_TOKEN, how it
// ended), a second tokenless connection (Retry policy), a third presenting the first's
// token (honoured: it skipped a Retry or stall the second met), resumption with 0-RTT,
// the idle waits with the token ages alongside, and the amplification handshakes.
func checkDoQ(ctx context.Context, p *Policy, st Settings) {
	peer := measure.NewPeer()
	first := p.count(ctx, st, peer)
	if !first.HasHandshake {
		p.Detail["count"] = "no handshake: " + string(first.Status)
		return
	}
	p.probeRTT(ctx, st, first)
	p.retries[0], p.stalls[0] = first.RetrySeen, p.stalled(first)
	p.TokenIssued = first.TokenReceived
	if tr := first.QlogTrace; tr != nil {
		params := tr.Server().Params
		if v, ok := paramInt(params, "max_idle_timeout"); ok {
			d := time.Duration(v) * time.Millisecond
			p.IdleAdvertised = &d
		} else if _, present := params["max_idle_timeout"]; !present && params != nil {
			zero := time.Duration(0) // not sent: no idle timeout of the server's (RFC 9000 §10.1)
			p.IdleAdvertised = &zero
		}
		if v, ok := paramInt(params, "initial_max_streams_bidi"); ok {
			p.MaxStreams = &v
		} else if params != nil {
			zero := int64(0)
			p.MaxStreams = &zero
		}
	}
	second := exchange(ctx, measure.DoQ, p.request(st, measure.ModeFresh))
	if second.HasHandshake {
		p.retries[1], p.stalls[1] = second.RetrySeen, p.stalled(second)
	}
	p.RetryPolicy = retryPolicy(p.VerifyRetry, p.retries[0], p.retries[1])
	if p.TokenIssued != nil && *p.TokenIssued {
		third := p.request(st, measure.ModeFresh)
		third.Peer = peer // the first connection's token (and QUIC version)
		r := exchange(ctx, measure.DoQ, third)
		if r.HasHandshake && r.TokenUsed != nil && *r.TokenUsed {
			p.TokenHonoured = honoured(p.retries[1], p.stalls[1], r.RetrySeen, p.stalled(r))
			p.Detail["token"] = "presented on a third connection"
		}
	}
	p.resumption(ctx, st)
	aged := p.tokenAges(ctx, st)
	p.idle(ctx, st)
	aged()
	if !st.NoAmplification {
		p.amplification(ctx, st)
	}
}

// checkTCP: the counting connection (DoH: its SETTINGS_MAX_CONCURRENT_STREAMS),
// resumption and the idle waits.
func checkTCP(ctx context.Context, p *Policy, st Settings) {
	first := p.count(ctx, st, nil)
	if !first.HasHandshake {
		p.Detail["count"] = "no handshake: " + string(first.Status)
		return
	}
	if first.PeerMaxStreams != nil {
		v := int64(*first.PeerMaxStreams)
		p.MaxStreams = &v
	}
	p.resumption(ctx, st)
	p.idle(ctx, st)
}

// stalled is whether a handshake met the anti-amplification limit (nil: not explained).
func (p *Policy) stalled(r *measure.Result) *bool {
	a := p.explain(r)
	if a == nil {
		return nil
	}
	return boolp(a.AmplificationStall)
}

// retryPolicy reads the Retry policy from verify's handshake earlier in the week (an
// earlier first contact) and the check's two tokenless connections one after another:
// always when both met a Retry; first when only the earliest contact did; never when
// none did. Two connections disagreeing the other way (the second met one, the first
// not) fit no policy: unknown.
func retryPolicy(verify, first, second *bool) string {
	if first == nil || second == nil {
		return ""
	}
	earliest := *first || (verify != nil && *verify)
	switch {
	case *first && *second:
		return "always"
	case earliest && !*second:
		return "first"
	case !earliest && !*second:
		return "never"
	}
	return ""
}

// honoured: a token skipped what a tokenless connection met (a Retry, an amplification
// stall) -> true; the token's connection met it all the same -> false; nothing to skip
// -> unknown (nil).
func honoured(retryWithout, stallWithout, retryWith, stallWith *bool) *bool {
	t := func(b *bool) bool { return b != nil && *b }
	switch {
	case t(retryWithout) && retryWith != nil:
		return boolp(!*retryWith)
	case t(stallWithout) && stallWith != nil:
		return boolp(!*stallWith)
	}
	return nil
}

// tokenTry is one token presented after a wait.
type tokenTry struct {
	age      time.Duration
	honoured *bool  // nil: not shown (why says so)
	why      string // what kept it unknown
}

func (t tokenTry) outcome() string {
	switch {
	case t.honoured == nil:
		return "unknown: " + t.why
	case *t.honoured:
		return "honoured"
	}
	return "refused"
}

// tokenAges presents a NEW_TOKEN token after each of st.TokenAges, all at once: per age,
// a connection of its own (a fresh Peer) gets a token, the age passes from its end, and
// a second connection presents the token; it is honoured as on the third connection
// (it skipped the Retry or the stall the tokenless second connection met). The token is
// older than the age by what followed its arrival on the first connection (the query's
// answer, the close) and half a round trip. Nothing is tried where nothing could show
// it: no token issued, or no Retry or stall without one. It returns at once; the
// returned function waits for the presentations and records TokenHonouredFor,
// TokenRefusedAfter and each age's outcome (detail "token_ages").
func (p *Policy) tokenAges(ctx context.Context, st Settings) (wait func()) {
	shown := func(b *bool) bool { return b != nil && *b }
	if len(st.TokenAges) == 0 || !shown(p.TokenIssued) || !(shown(p.retries[1]) || shown(p.stalls[1])) {
		return func() {}
	}
	tries := make([]tokenTry, len(st.TokenAges))
	var wg sync.WaitGroup
	for i, age := range st.TokenAges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tries[i] = p.tokenAfter(ctx, st, age)
		}()
	}
	return func() {
		wg.Wait()
		p.TokenHonouredFor, p.TokenRefusedAfter = tokenAgeBounds(tries)
		out := make(map[string]string, len(tries))
		for _, t := range tries {
			out[t.age.String()] = t.outcome()
		}
		p.Detail["token_ages"] = out
	}
}

// tokenAfter gets a token on a connection of its own, waits age, and presents it.
func (p *Policy) tokenAfter(ctx context.Context, st Settings, age time.Duration) tokenTry {
	t := tokenTry{age: age}
	peer := measure.NewPeer()
	get := p.request(st, measure.ModeFresh)
	get.Peer = peer
	r := exchange(ctx, measure.DoQ, get)
	if r.TokenReceived == nil || !*r.TokenReceived {
		t.why = "no NEW_TOKEN on the connection that was to get one (" + string(r.Status) + ")"
		return t
	}
	timer := time.NewTimer(age)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		t.why = "cancelled during the wait"
		return t
	}
	present := p.request(st, measure.ModeFresh)
	present.Peer = peer
	r = exchange(ctx, measure.DoQ, present)
	if !r.HasHandshake || r.TokenUsed == nil || !*r.TokenUsed {
		t.why = "the connection presenting the token ended with " + string(r.Status)
		return t
	}
	t.honoured = honoured(p.retries[1], p.stalls[1], r.RetrySeen, p.stalled(r))
	if t.honoured == nil {
		t.why = "the presenting connection's Retry or stall is not known"
	}
	return t
}

// tokenAgeBounds: the longest age after which a token was honoured and the shortest
// after which one was refused (nil: none was); ages whose outcome is unknown count for
// neither. A refusal at an age shorter than an honoured one is kept as found (the server
// refused for a reason other than the age): the two values then show the contradiction.
func tokenAgeBounds(tries []tokenTry) (honouredFor, refusedAfter *time.Duration) {
	for _, t := range tries {
		if t.honoured == nil {
			continue
		}
		a := t.age
		if *t.honoured && (honouredFor == nil || a > *honouredFor) {
			honouredFor = &a
		}
		if !*t.honoured && (refusedAfter == nil || a < *refusedAfter) {
			refusedAfter = &a
		}
	}
	return honouredFor, refusedAfter
}

func paramInt(params map[string]json.RawMessage, name string) (int64, bool) {
	raw, ok := params[name]
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	return v, err == nil
}

// amplification: one tokenless, ticketless handshake per (Initial size, key share),
// explained by qlogana against the path RTT (what the server sent before our ACK against
// 3x our bytes).
func (p *Policy) amplification(ctx context.Context, st Settings) {
	for _, ks := range st.KeyShares {
		for _, size := range st.InitialSizes {
			req := p.request(st, measure.ModeFresh)
			req.KeyShare, req.InitialPacketSize = ks, uint16(size)
			r := exchange(ctx, measure.DoQ, req)
			a := Amplification{InitialSize: size, KeyShare: ks, Status: r.Status, At: r.StartedAt}
			if r.HasHandshake {
				a.RetrySeen, a.Handshake = r.RetrySeen, r.Handshake
				a.Analysis = p.explain(r)
			}
			p.Amplification = append(p.Amplification, a)
		}
	}
}
