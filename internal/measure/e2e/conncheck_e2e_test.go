package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/conncheck"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// checkIdleWaits avoid the population's idle timeouts (4 s, 5 s, 7 s, 10 s, ...) by a
// margin: the server's timer and ours start a fraction of an RTT apart. 12 s is past
// the 10 s of simserver's DoT and DoH and of CoreDNS's and dnsproxy's DoT (and CoreDNS's
// DoQ), so their timeouts show as a dead connection, not only as alive at 8 s.
var checkIdleWaits = []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 12 * time.Second}

// checkTokenAges are the waits after which a NEW_TOKEN token is presented: doq-retry's
// tokens live 10 s, so 8 s is honoured with a 2 s margin (the token is older than the
// wait by the rest of its connection and half a round trip) and 12 s is not.
var checkTokenAges = []time.Duration{0, 4 * time.Second, 8 * time.Second, 12 * time.Second}

const checkMaxQueries = 60 // above doq-policy's 40

// TestConnCheckPolicies runs the connection check on peers and simserver hosts with
// known limits and compares each finding with the population (ExpectPolicy): queries a
// connection carries before the server closes it, the advertised max_idle_timeout and
// when an idle connection really goes (hickory-dns drops it at 5 s while advertising
// 30 s), concurrent streams, NEW_TOKEN issued and honoured (where a Retry or a stall
// shows it) and after which waits (against the server's token age), the Retry policy (dnsproxy's first contact from a vantage address nothing
// else uses), 0-RTT, the session ticket's lifetime. DoT and DoH of simserver's hosts
// and of the peers that serve them (CoreDNS, dnsproxy): queries per connection, idle
// timeout, DoH's SETTINGS_MAX_CONCURRENT_STREAMS, resumption and ticket lifetime, and
// nothing of DoQ's (NULL). Each endpoint is a subtest; a peer the testbed did not start
// skips its own (testbed.PeerSilent).
func TestConnCheckPolicies(t *testing.T) {
	v := testbed.Require(t)
	pop := v.Population
	type target struct {
		class string
		proto measure.Protocol
		port  uint16
		first bool // checked from the first-contact vantage (Retry policy only)
	}
	targets := []target{
		{"doq-policy", measure.DoQ, 853, false}, {"doq-policy", measure.DoT, 853, false},
		{"doq-853", measure.DoQ, 853, false}, {"doq-853", measure.DoT, 853, false}, {"doq-853", measure.DoH, 443, false},
		{"doh", measure.DoH, 443, false},
		{"doq-retry", measure.DoQ, 853, false},
		{"doq-bigchain-honour", measure.DoQ, 853, false}, {"doq-bigchain-ignore", measure.DoQ, 853, false},
		{"peer-coredns", measure.DoQ, 853, false}, {"peer-coredns", measure.DoT, 853, false}, {"peer-coredns", measure.DoH, 443, false},
		{"peer-hickory", measure.DoQ, 853, false},
		{"peer-aioquic", measure.DoQ, 784, false}, {"peer-aioquic-retry", measure.DoQ, 784, false},
		{"peer-dnsproxy", measure.DoQ, 853, false}, {"peer-dnsproxy", measure.DoQ, 784, true},
		{"peer-dnsproxy", measure.DoT, 853, false}, {"peer-dnsproxy", measure.DoH, 443, false},
		{"peer-dnsproxy-public", measure.DoT, 853, false}, {"peer-dnsproxy-public", measure.DoH, 443, false},
	}
	st := conncheck.Settings{MaxQueries: checkMaxQueries, IdleWaits: checkIdleWaits, TokenAges: checkTokenAges, NoAmplification: true,
		Timeout: 5 * time.Second}
	results := make([]conncheck.Policy, len(targets))
	skip := make([]error, len(targets)) // why a target is not checked
	var wg sync.WaitGroup
	for i, tg := range targets {
		rs := pop.ByClass(tg.class)
		if len(rs) == 0 {
			t.Fatalf("population has no %s", tg.class)
		}
		a := rs[0].Prefix.Addr()
		ep := conncheck.Endpoint{Addr: netip.AddrPortFrom(a, tg.port), Protocol: tg.proto, ALPN: "doq"}
		results[i].Endpoint = ep
		if err := testbed.PeerSilent(t, pop, rs[0]); err != nil {
			skip[i] = err
			continue
		}
		if tg.first {
			if firstContacted[ep.Addr] {
				// Another test of this binary made the first contact: the server
				// remembers the address for 30 minutes.
				skip[i] = fmt.Errorf("%v was already first-contacted from vantage %d: its Retry policy is not checked here", ep.Addr, firstContactVantage)
				continue
			}
			firstContacted[ep.Addr] = true
			// Sockets open in vantage 1's namespace; only the exchanges on this goroutine
			// (no idle waits or token ages, which run on goroutines of their own).
			fs := st
			fs.IdleWaits, fs.TokenAges = []time.Duration{}, []time.Duration{}
			ns := netns.Instance{Name: v.Instance, Vantages: firstContactVantage + 1}.Vantage(firstContactVantage)
			if err := netns.Do(ns, func() error { results[i] = conncheck.Check(context.Background(), ep, fs); return nil }); err != nil {
				t.Fatal(err)
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = conncheck.Check(context.Background(), ep, st)
		}()
	}
	wg.Wait()
	for i, tg := range targets {
		p := results[i]
		t.Run(fmt.Sprintf("%s %s %v", tg.class, tg.proto, p.Addr), func(t *testing.T) {
			if skip[i] != nil {
				t.Skipf("SKIP: %v", skip[i])
			}
			rec := pop.Lookup(p.Addr.Addr())
			want, ok := pop.ExpectPolicy(p.Addr.Addr(), p.Addr.Port(), string(tg.proto))
			if !ok {
				t.Fatal("the population has no policy for this service")
			}
			if p.Status != measure.StatusOK {
				t.Fatalf("status %s (%v)", p.Status, p.Detail)
			}
			var bad []string
			if tg.first {
				if p.RetryPolicy != want.Retry {
					bad = append(bad, fmt.Sprintf("Retry policy %q, population says %q", p.RetryPolicy, want.Retry))
				}
			} else {
				bad = checkPolicy(p, want, rec, tg.proto)
			}
			for _, b := range bad {
				t.Error(b)
			}
			t.Logf("answered %d of %d (closed %v: %s), idle advertised %v alive %v dead %v, streams %v, token %v honoured %v (for %v, refused after %v), Retry %q, 0-RTT %v, resumed %v, ticket %v",
				p.QueriesAnswered, p.QueriesSent, deref(p.ClosedByServer), p.CloseDetail, deref(p.IdleAdvertised), deref(p.IdleAlive),
				deref(p.IdleDead), deref(p.MaxStreams), deref(p.TokenIssued), deref(p.TokenHonoured), deref(p.TokenHonouredFor),
				deref(p.TokenRefusedAfter), p.RetryPolicy, deref(p.ZeroRTT), deref(p.Resumed), deref(p.TicketLifetime))
		})
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// checkPolicy compares one endpoint's findings with the population's policy.
func checkPolicy(p conncheck.Policy, want population.Policy, rec *population.Record, proto measure.Protocol) []string {
	var bad []string
	// Queries per connection: exactly the limit, or every query sent without a close.
	switch {
	case want.MaxQueries > 0 && (p.ClosedByServer == nil || !*p.ClosedByServer || p.QueriesAnswered != want.MaxQueries):
		bad = append(bad, fmt.Sprintf("answered %d of %d (closed %v), population: the server closes after %d", p.QueriesAnswered, p.QueriesSent, deref(p.ClosedByServer), want.MaxQueries))
	case want.MaxQueries == 0 && (p.ClosedByServer == nil || *p.ClosedByServer || p.QueriesAnswered != checkMaxQueries):
		bad = append(bad, fmt.Sprintf("answered %d of %d (closed %v: %s), population: no limit", p.QueriesAnswered, p.QueriesSent, deref(p.ClosedByServer), p.CloseDetail))
	}
	// Idle: every wait below the server's timeout kept the connection, every one at or
	// above it lost it.
	if want.Idle > 0 {
		var alive, dead *time.Duration
		for _, w := range checkIdleWaits {
			if w < want.Idle {
				alive = &w
			} else if dead == nil {
				dead = &w
			}
		}
		if fmt.Sprint(deref(p.IdleAlive)) != fmt.Sprint(deref(alive)) || fmt.Sprint(deref(p.IdleDead)) != fmt.Sprint(deref(dead)) {
			bad = append(bad, fmt.Sprintf("idle: alive after %v, gone after %v; population: idle timeout %s (alive %v, gone %v)",
				deref(p.IdleAlive), deref(p.IdleDead), idleString(want.Idle), deref(alive), deref(dead)))
		}
	}
	if want.TicketLifetime > 0 && (p.TicketLifetime == nil || *p.TicketLifetime != want.TicketLifetime) {
		bad = append(bad, fmt.Sprintf("ticket lifetime %v, population says %v", deref(p.TicketLifetime), want.TicketLifetime))
	}
	if p.Resumed == nil || !*p.Resumed {
		bad = append(bad, fmt.Sprintf("resumed %v: every server here resumes its sessions", deref(p.Resumed)))
	}
	// Streams: DoQ's initial_max_streams_bidi, DoH's SETTINGS_MAX_CONCURRENT_STREAMS;
	// DoT has none (NULL).
	switch {
	case proto == measure.DoT && p.MaxStreams != nil:
		bad = append(bad, fmt.Sprintf("streams %v on DoT, want NULL", *p.MaxStreams))
	case want.MaxStreams > 0 && (p.MaxStreams == nil || *p.MaxStreams != int64(want.MaxStreams)):
		bad = append(bad, fmt.Sprintf("streams %v, population says %d", deref(p.MaxStreams), want.MaxStreams))
	}
	if proto != measure.DoQ {
		// Over TCP nothing of DoQ's applies: conncheck stores NULL.
		if p.IdleAdvertised != nil || p.ZeroRTT != nil || p.TokenIssued != nil || p.TokenHonoured != nil || p.RetryPolicy != "" ||
			p.TokenHonouredFor != nil || p.TokenRefusedAfter != nil {
			bad = append(bad, fmt.Sprintf("DoQ findings on %s (max_idle_timeout %v, 0-RTT %v, token %v honoured %v, Retry %q), want NULL",
				proto, deref(p.IdleAdvertised), deref(p.ZeroRTT), deref(p.TokenIssued), deref(p.TokenHonoured), p.RetryPolicy))
		}
		return bad
	}
	if want.IdleAdvertised > 0 && (p.IdleAdvertised == nil || *p.IdleAdvertised != want.IdleAdvertised) {
		bad = append(bad, fmt.Sprintf("max_idle_timeout %v, population says %v", deref(p.IdleAdvertised), want.IdleAdvertised))
	}
	if p.ZeroRTT == nil || *p.ZeroRTT != want.ZeroRTT {
		bad = append(bad, fmt.Sprintf("0-RTT %v, population says %v", deref(p.ZeroRTT), want.ZeroRTT))
	}
	issued := want.Token == population.TokenHonour || want.Token == population.TokenIgnore
	if p.TokenIssued == nil || *p.TokenIssued != issued {
		bad = append(bad, fmt.Sprintf("NEW_TOKEN issued %v, population says token=%s", deref(p.TokenIssued), want.Token))
	}
	// Honoured shows only where a tokenless connection meets a Retry or a stall.
	visible := want.Retry == population.RetryPolicyAlways || (want.Retry != population.RetryPolicyFirst &&
		rec.Cert != "" && strings.HasPrefix(rec.Cert, "chain-big"))
	switch {
	case issued && visible && (p.TokenHonoured == nil || *p.TokenHonoured != (want.Token == population.TokenHonour)):
		bad = append(bad, fmt.Sprintf("token honoured %v, population says token=%s", deref(p.TokenHonoured), want.Token))
	case !visible && p.TokenHonoured != nil:
		bad = append(bad, fmt.Sprintf("token honoured %v although nothing could show it", *p.TokenHonoured))
	}
	bad = append(bad, checkTokenAgesOf(p, want, issued && visible)...)
	// From vantage 0 a retry=first server has seen the address (primed below by the
	// other tests or this check's own first connection): "never" is what two tokenless
	// connections then see; its first contacts are checked from vantage 1.
	wantRetry := want.Retry
	if want.Retry == population.RetryPolicyFirst {
		wantRetry = slicesFirst(p.RetryPolicy, population.RetryPolicyFirst, population.RetryPolicyNever)
	}
	if p.RetryPolicy != wantRetry {
		bad = append(bad, fmt.Sprintf("Retry policy %q, population says %q", p.RetryPolicy, want.Retry))
	}
	return bad
}

// checkTokenAgesOf: where a presented token shows (shown), it is honoured after every
// wait below the server's token age and refused after every one at or above it, so the
// check's longest honoured wait and shortest refused one are those of checkTokenAges on
// either side of it; a token=ignore server refuses it after every wait; an honouring
// server whose token age is not known here is not asserted. Where nothing shows it,
// both stay NULL.
func checkTokenAgesOf(p conncheck.Policy, want population.Policy, shown bool) []string {
	var wantFor, wantAfter *time.Duration
	switch {
	case !shown:
	case want.Token == population.TokenIgnore:
		wantAfter = &checkTokenAges[0]
	case want.TokenAge > 0:
		for _, a := range checkTokenAges {
			if a < want.TokenAge {
				wantFor = &a
			} else if wantAfter == nil {
				wantAfter = &a
			}
		}
	default:
		return nil
	}
	if fmt.Sprint(deref(p.TokenHonouredFor)) != fmt.Sprint(deref(wantFor)) || fmt.Sprint(deref(p.TokenRefusedAfter)) != fmt.Sprint(deref(wantAfter)) {
		return []string{fmt.Sprintf("token honoured after waits up to %v, refused after %v (%v); population: token=%s, honoured for %v (up to %v, refused after %v)",
			deref(p.TokenHonouredFor), deref(p.TokenRefusedAfter), p.Detail["token_ages"], want.Token, want.TokenAge, deref(wantFor), deref(wantAfter))}
	}
	return nil
}

// idleString is an idle timeout as the population gives it.
func idleString(d time.Duration) string {
	if d == population.NoIdleTimeout {
		return "none"
	}
	return d.String()
}

// slicesFirst returns got when it is one of ok, else ok[0].
func slicesFirst(got string, ok ...string) string {
	if slices.Contains(ok, got) {
		return got
	}
	return ok[0]
}

// TestConnCheckAmplification: one tokenless handshake per client Initial size (1,200,
// 1,350, 1,452 bytes) and key share (X25519, X25519MLKEM768) to every host whose chain
// decides a cell (chain-mid, the edge chains, chain-big behind simserver, aioquic and
// dnsproxy's public set-up) and a small-chain host: each stalls exactly where the
// population's model says (the first flight above what an unvalidated server may send),
// and then takes two round trips, one otherwise. A server slower than a round trip (the
// handshakes run at once on a shared host) has our ACK before it reaches its limit and
// never waits: its first flight then carries more than 3x our Initial, and one round
// trip is right, or two without a cause when its flight came in two bursts around our
// ACK. The test fails if no predicted stall was seen at all.
func TestConnCheckAmplification(t *testing.T) {
	v := testbed.Require(t)
	pop := v.Population
	classes := []string{"doq-853", "doq-midchain-ignore", "doq-edgechain-x", "doq-edgechain-m", "doq-bigchain-ignore",
		"peer-aioquic-bigchain", "peer-dnsproxy-public"}
	st := conncheck.Settings{IdleWaits: []time.Duration{}, TokenAges: []time.Duration{}, Timeout: 5 * time.Second, MaxQueries: 1}
	results := make([]conncheck.Policy, len(classes))
	var wg sync.WaitGroup
	for i, c := range classes {
		rs := pop.ByClass(c)
		if len(rs) == 0 {
			t.Fatalf("population has no %s", c)
		}
		a := rs[0].Prefix.Addr()
		port := rs[0].QUICPorts[len(rs[0].QUICPorts)-1]
		if rs[0].RetryFirst {
			primeRetryFirst(t, rs[0], a, port)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = conncheck.Check(context.Background(), conncheck.Endpoint{Addr: netip.AddrPortFrom(a, port), Protocol: measure.DoQ, ALPN: "doq"}, st)
		}()
	}
	wg.Wait()
	cells, stalls, late := 0, 0, 0
	for i, c := range classes {
		p := results[i]
		// The handshakes are explained against the path RTT conncheck's probe measured
		// (measure's VN probe), which agrees with the delay line's as the hourly round's
		// probe does (checkEndpoint's tolerance). aioquic leaves the probe unanswered at
		// times (checkEndpoint): its handshakes are then explained against their qlog's
		// own RTT.
		path := pop.PathOf(p.Addr.Addr())
		switch {
		case p.PathRTT == 0 && pop.Lookup(p.Addr.Addr()).Peer == population.PeerAioquic:
			t.Logf("%s: the RTT probe went unanswered (%v)", c, p.Detail["path_rtt"])
		case absDur(p.PathRTT-path.RTT) > tolerance(path, path.RTT):
			t.Errorf("%s: path RTT %v measured, the delay line's %v (%v)", c, p.PathRTT, path.RTT, p.Detail["path_rtt"])
		default:
			t.Logf("%s: path %v, probe %v", c, path.RTT, p.PathRTT)
		}
		if len(p.Amplification) != len(conncheck.DefaultInitialSizes)*len(conncheck.DefaultKeyShares) {
			t.Errorf("%s: %d amplification handshakes (%v)", c, len(p.Amplification), p.Detail)
			continue
		}
		for _, a := range p.Amplification {
			client, _ := population.ClientFor(string(a.KeyShare), a.InitialSize)
			want := pop.Stalls(p.Addr.Addr(), p.Addr.Port(), population.ProtoDoQ, population.PhaseWarmup, client)
			cell := fmt.Sprintf("%s %v %s %d", c, p.Addr, a.KeyShare, a.InitialSize)
			if a.Analysis == nil {
				t.Errorf("%s: no handshake explained (%s)", cell, a.Status)
				continue
			}
			cells++
			an := a.Analysis
			if p.PathRTT > 0 && an.RTTNS != p.PathRTT.Nanoseconds() {
				t.Errorf("%s: explained against an RTT of %v, not the probe's %v", cell, time.Duration(an.RTTNS), p.PathRTT)
			}
			wantRTT := 1
			if want {
				wantRTT, stalls = 2, stalls+1
			}
			if want && !an.AmplificationStall && (an.Cause == qlogana.Cause1RTT || an.Cause == qlogana.CauseUnknown) &&
				an.ServerBytesPreAck > qlogana.AmplificationFactor*an.ClientInitialBytes {
				// The limit never bound: no stall is right. Its round trips are the slow
				// server's: one, or two with no cause when its flight came in two bursts
				// around our ACK (qlogana counts what the packets show, and explains none).
				late++
				t.Logf("%s: the server sent %d bytes before our ACK, past 3x our %d: it had our ACK before its limit (no stall; %d round trips, cause %s)",
					cell, an.ServerBytesPreAck, an.ClientInitialBytes, an.RoundTrips, an.Cause)
			} else if an.AmplificationStall != want || an.RoundTrips != wantRTT {
				t.Errorf("%s: stall %v, %d round trips (cause %s, client %d bytes, server %d before our ACK); population: stall %v (flight %d, sendable %d)",
					cell, an.AmplificationStall, an.RoundTrips, an.Cause, an.ClientInitialBytes, an.ServerBytesPreAck, want,
					pop.Certs[pop.Lookup(p.Addr.Addr()).Cert].ServerFlightBytes(client), population.SendableUnvalidated(client))
			}
			if an.ClientInitialBytes != client.InitialBytes {
				t.Errorf("%s: client sent %d bytes before the server's flight, want %d", cell, an.ClientInitialBytes, client.InitialBytes)
			}
		}
	}
	t.Logf("%d cells, %d stalls predicted, %d of them not waited for (a slow server)", cells, stalls, late)
	if stalls > 0 && late == stalls {
		t.Error("no predicted stall was seen: the stall case is not exercised")
	}
}
