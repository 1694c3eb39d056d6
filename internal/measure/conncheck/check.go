// Package conncheck is the weekly connection check: for every resolver of a verification
// run it finds what its server allows one connection (queries before it closes it, idle
// timeout against the advertised max_idle_timeout, NEW_TOKEN honoured, Retry policy,
// 0-RTT, session ticket lifetime, concurrent streams) over DoQ, DoT and DoH, and how
// its DoQ handshake meets the anti-amplification limit for each client Initial size and
// key share. Every exchange is measure's (the clients the hourly round uses); the
// handshake explanations are qlogana's.
package conncheck

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/measure/rtt"
)

// Endpoint is one (address, port, protocol) to check.
type Endpoint struct {
	Addr       netip.AddrPort
	Protocol   measure.Protocol // DoQ, DoT or DoH
	ALPN       string           // DoQ: the verified ALPN
	ServerName string           // SNI (verify's), "" for none
	// VerifyRetry: verify's handshake with this endpoint met a Retry (quic_stacks
	// evidence); nil when unknown. A first contact earlier in the week.
	VerifyRetry *bool
	// ChainBytes and ChainCerts: the certificate chain verify recorded (0: unknown).
	ChainBytes, ChainCerts int
}

// Settings say how far the check goes.
type Settings struct {
	// MaxQueries is how many queries the counting connection sends at most (a server
	// that carries them all "did not close").
	MaxQueries int
	// Streams is how many of them are outstanding at once.
	Streams int
	// IdleWaits are the idle periods tried (each on a connection of its own, at once).
	IdleWaits []time.Duration
	// TokenAges are the waits after which a DoQ NEW_TOKEN token is presented (each with
	// a token of its own, at once and alongside the idle waits): how long the server
	// honours its tokens.
	TokenAges []time.Duration
	// Timeout bounds every exchange but the idle ones (which get their wait on top).
	Timeout time.Duration
	// InitialSizes and KeyShares are the client configurations of the amplification
	// handshakes (every pair, tokenless, fresh).
	InitialSizes []int
	KeyShares    []measure.KeyShare
	// NoAmplification skips the amplification handshakes.
	NoAmplification bool
	// Name is the query name.
	Name string
	// RTTSamples is how many RTT probes (measure's: internal/measure/rtt, QUIC Version
	// Negotiation) give a DoQ endpoint's path RTT, against which every handshake of the
	// check is explained; 0: rtt.DefaultSamples, negative: none (the qlog's own RTT).
	RTTSamples int
}

// Defaults.
var (
	DefaultIdleWaits    = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second}
	DefaultTokenAges    = []time.Duration{0, 10 * time.Second, 40 * time.Second} // within the longest idle wait
	DefaultInitialSizes = []int{1200, 1350, 1452}
	DefaultKeyShares    = []measure.KeyShare{measure.KeyShareX25519, measure.KeyShareMLKEM}
)

const (
	DefaultMaxQueries = 300
	DefaultStreams    = 4
	DefaultTimeout    = 10 * time.Second
	// idleAnswerBudget is what a query after an idle wait may take.
	idleAnswerBudget = 3 * time.Second
)

func (s *Settings) defaults() {
	if s.MaxQueries <= 0 {
		s.MaxQueries = DefaultMaxQueries
	}
	if s.Streams <= 0 {
		s.Streams = DefaultStreams
	}
	if s.IdleWaits == nil {
		s.IdleWaits = DefaultIdleWaits
	}
	if s.TokenAges == nil {
		s.TokenAges = DefaultTokenAges
	}
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.InitialSizes == nil {
		s.InitialSizes = DefaultInitialSizes
	}
	if s.KeyShares == nil {
		s.KeyShares = DefaultKeyShares
	}
	if s.Name == "" {
		s.Name = "test.com"
	}
	if s.RTTSamples == 0 {
		s.RTTSamples = rtt.DefaultSamples
	}
}

// Policy is what the check found of one endpoint (a connection_policies row). Pointers
// are nil where the exchanges could not show the value.
type Policy struct {
	Endpoint
	Status          measure.Status // of the counting connection
	QueriesSent     int
	QueriesAnswered int
	ClosedByServer  *bool
	CloseDetail     string
	IdleAdvertised  *time.Duration // DoQ max_idle_timeout
	IdleAlive       *time.Duration // longest idle wait after which a query was answered
	IdleDead        *time.Duration // shortest idle wait after which it was not
	MaxStreams      *int64
	TokenIssued     *bool
	TokenHonoured   *bool
	// TokenHonouredFor is the longest of the TokenAges after which a token was honoured,
	// TokenRefusedAfter the shortest after which it was not (nil: none was, or nothing
	// could show it).
	TokenHonouredFor  *time.Duration
	TokenRefusedAfter *time.Duration
	RetryPolicy       string // never, first, always; "" unknown
	ZeroRTT           *bool
	Resumed           *bool
	TicketLifetime    *time.Duration
	Detail            map[string]any
	At                time.Time
	Amplification     []Amplification
	retries           [2]*bool // the two tokenless connections' Retry (DoQ)
	stalls            [2]*bool // and their amplification stall
	firstExchangeErr  error

	// PathRTT is the DoQ endpoint's RTT from measure's RTT probe (the median of the
	// answered samples; 0: none answered, and the handshakes are explained against
	// their qlog's own RTT).
	PathRTT time.Duration
}

// probeRTT takes the endpoint's path RTT the way the hourly round does (rtt.Prober's
// QUIC probe, after a measurement that got an answer, each sample's wait bounded by that
// answer's resolve time), records it in PathRTT and the detail ("path_rtt": the RTT
// and the samples answered of those sent).
func (p *Policy) probeRTT(ctx context.Context, st Settings, answered *measure.Result) {
	if st.RTTSamples <= 0 {
		return
	}
	pr := rtt.New()
	defer pr.Close() // a QUIC probe opens no raw socket: nothing to fail
	samples := pr.Probe(ctx, rtt.QUIC, p.Addr, st.RTTSamples, rtt.TimeoutAfter(answered.First().Resolve, rtt.DefaultTimeout))
	p.PathRTT = rtt.PathRTT(samples)
	n := 0
	for _, s := range samples {
		if s.Answered() {
			n++
		}
	}
	d := map[string]any{"samples": len(samples), "answered": n}
	if p.PathRTT > 0 {
		d["rtt_ns"] = p.PathRTT.Nanoseconds()
	}
	p.Detail["path_rtt"] = d
}

// explain is the analysis of a DoQ exchange's handshake the check keeps: against
// PathRTT when the probe measured one (qlogana.Trace.AgainstPathRTT, as the hourly
// round's), else the qlog's own; nil when no completed handshake is explained.
func (p *Policy) explain(r *measure.Result) *qlogana.Analysis {
	a := r.QlogTrace.AgainstPathRTT(r.QlogAnalysis, p.PathRTT.Nanoseconds())
	if a == nil || !a.HandshakeComplete {
		return nil
	}
	return a
}

// Amplification is one tokenless DoQ handshake with a client configuration.
type Amplification struct {
	InitialSize int
	KeyShare    measure.KeyShare
	Status      measure.Status
	RetrySeen   *bool
	Analysis    *qlogana.Analysis // nil: no handshake to explain
	Handshake   time.Duration
	At          time.Time
}

// Check runs the whole check of one endpoint.
func Check(ctx context.Context, ep Endpoint, st Settings) Policy {
	st.defaults()
	p := Policy{Endpoint: ep, At: time.Now(), Detail: map[string]any{}}
	switch ep.Protocol {
	case measure.DoQ:
		checkDoQ(ctx, &p, st)
	case measure.DoT, measure.DoH:
		checkTCP(ctx, &p, st)
	}
	return p
}

func (p *Policy) request(st Settings, mode measure.Mode) *measure.Request {
	r := &measure.Request{Addr: p.Addr, ServerName: p.ServerName, Name: st.Name, Timeout: st.Timeout, Mode: mode,
		KeyShare: measure.KeyShareX25519}
	if p.Protocol == measure.DoQ {
		r.ALPN = []string{p.ALPN}
	}
	if p.Protocol == measure.DoH {
		r.Variant = measure.VariantPOST
	}
	return r
}

func exchange(ctx context.Context, proto measure.Protocol, req *measure.Request) *measure.Result {
	m, err := measure.For(proto)
	if err != nil {
		return &measure.Result{Status: measure.StatusError, Err: err}
	}
	return m.Measure(ctx, req)
}

// count runs the counting connection: up to MaxQueries queries, Streams outstanding,
// until the server ends it. It fills the query counts and what ended the connection,
// and returns the exchange.
func (p *Policy) count(ctx context.Context, st Settings, peer *measure.Peer) *measure.Result {
	req := p.request(st, measure.ModePersistent)
	req.Queries, req.Streams, req.Peer = st.MaxQueries, st.Streams, peer
	req.Timeout = st.Timeout + time.Duration(st.MaxQueries/st.Streams+1)*time.Second
	req.QueryTimeout = st.Timeout
	res := exchange(ctx, p.Protocol, req)
	statuses := res.Queries
	p.Status = res.Status
	if !res.HasHandshake {
		p.firstExchangeErr = res.Err
		return res
	}
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].Seq < statuses[j].Seq })
	p.QueriesSent = len(statuses)
	var failed *measure.Query
	for i := range statuses {
		if statuses[i].Status != measure.StatusOK {
			failed = &statuses[i]
			break
		}
		p.QueriesAnswered++
	}
	if failed == nil && len(statuses) < st.MaxQueries {
		// The session ended before every query was sent: a DoT/DoH pipeline stops at the
		// first failure (the exchange's status), and when the server closes the
		// connection while no query is outstanding, measure's pipe ends the session
		// without one (status ok, fewer queries than asked).
		end := measure.Query{Seq: len(statuses), Status: res.Status, Err: res.Err}
		if res.Status == measure.StatusOK {
			end.Status, end.Err = measure.StatusReset, fmt.Errorf("the session ended after %d of %d queries", len(statuses), st.MaxQueries)
		}
		failed = &end
		p.QueriesSent++
	}
	p.Status = measure.StatusOK
	switch {
	case failed == nil:
		p.ClosedByServer = boolp(false)
	case endedByServer(failed.Status):
		p.ClosedByServer = boolp(true)
		p.CloseDetail = string(failed.Status)
		if failed.Err != nil {
			p.CloseDetail += ": " + failed.Err.Error()
		}
	default:
		// A query that timed out or went wrong otherwise says nothing of a limit.
		p.Status = failed.Status
		p.CloseDetail = string(failed.Status)
		if failed.Err != nil {
			p.CloseDetail += ": " + failed.Err.Error()
		}
	}
	if res.QlogTrace != nil && res.QlogTrace.Close != nil && res.QlogTrace.Close.Initiator == "remote" {
		c := res.QlogTrace.Close
		p.CloseDetail = fmt.Sprintf("CONNECTION_CLOSE %s %s %q", c.Space, cmpOr(c.Error, codeString(c.Code)), c.Reason)
	}
	return res
}

func codeString(c *uint64) string {
	if c == nil {
		return ""
	}
	return "0x" + strconv.FormatUint(*c, 16)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// endedByServer: the statuses of a query the server's end of the connection cut short.
func endedByServer(s measure.Status) bool {
	switch s {
	case measure.StatusReset, measure.StatusConnRefused, measure.StatusQUICError:
		return true
	}
	return false
}

// idle tries every idle wait on a connection of its own (in parallel): one query, the
// wait, one more query. alive: the second was answered; dead: it was not.
func (p *Policy) idle(ctx context.Context, st Settings) {
	type result struct {
		wait  time.Duration
		alive bool
		known bool
	}
	out := make([]result, len(st.IdleWaits))
	var wg sync.WaitGroup
	for i, w := range st.IdleWaits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := p.request(st, measure.ModePersistent)
			req.Timeout = st.Timeout + w + idleAnswerBudget
			req.Next = func(ctx context.Context, seq int) (string, uint16, bool) {
				switch seq {
				case 0:
					return st.Name, 1, true
				case 1:
					select {
					case <-time.After(w):
						return st.Name, 1, true
					case <-ctx.Done():
						return "", 0, false
					}
				}
				return "", 0, false
			}
			res := exchange(ctx, p.Protocol, req)
			out[i].wait = w
			if len(res.Queries) == 2 && res.Queries[0].Status == measure.StatusOK {
				out[i].known = true
				out[i].alive = res.Queries[1].Status == measure.StatusOK
			}
		}()
	}
	wg.Wait()
	for _, r := range out {
		if !r.known {
			continue
		}
		w := r.wait
		if r.alive && (p.IdleAlive == nil || w > *p.IdleAlive) {
			p.IdleAlive = &w
		}
		if !r.alive && (p.IdleDead == nil || w < *p.IdleDead) {
			p.IdleDead = &w
		}
	}
}

func boolp(b bool) *bool { return &b }

// recordingSessions is a session cache that keeps the lifetime of the last ticket put
// into it.
type recordingSessions struct {
	tls.ClientSessionCache
	mu       sync.Mutex
	lifetime *time.Duration
}

func (r *recordingSessions) Put(key string, cs *tls.ClientSessionState) {
	if cs != nil {
		if d, ok := TicketLifetime(cs); ok {
			r.mu.Lock()
			r.lifetime = &d
			r.mu.Unlock()
		}
	}
	r.ClientSessionCache.Put(key, cs)
}

func (r *recordingSessions) got() *time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lifetime
}

// TicketLifetime is the lifetime a TLS 1.3 server gave a session ticket (RFC 8446
// §4.6.1 ticket_lifetime): crypto/tls keeps it as the session's use-by time, which its
// serialisation (SessionState.Bytes: created_at at bytes 5..12, and for a TLS 1.3 client
// session use_by and age_add as the last 12 bytes) carries. crypto/tls calls that
// encoding opaque: a Go release that changes it makes this false (a test against a Go
// server, whose tickets live 7 days, would say so), never a wrong figure outside
// 1 s .. 7 days (the client refuses longer ones).
func TicketLifetime(cs *tls.ClientSessionState) (time.Duration, bool) {
	_, state, err := cs.ResumptionState()
	if err != nil || state == nil {
		return 0, false
	}
	b, err := state.Bytes()
	if err != nil || len(b) < 5+8+12 {
		return 0, false
	}
	version := binary.BigEndian.Uint16(b[0:2])
	if version != tls.VersionTLS13 || b[2] != 2 { // 2: a client's session
		return 0, false
	}
	created := binary.BigEndian.Uint64(b[5:13])
	useBy := binary.BigEndian.Uint64(b[len(b)-12 : len(b)-4])
	if useBy < created {
		return 0, false
	}
	d := time.Duration(useBy-created) * time.Second
	if d < 0 || d > 7*24*time.Hour+time.Minute {
		return 0, false
	}
	return d, true
}

// resumption: a first connection whose ticket is kept (its lifetime recorded), then a
// second that presents it: resumed or not, and for DoQ, whether its 0-RTT query was
// accepted.
func (p *Policy) resumption(ctx context.Context, st Settings) {
	mode := measure.ModeResumed
	if p.Protocol == measure.DoQ {
		mode = measure.Mode0RTT
	}
	peer := measure.NewPeer()
	rec := &recordingSessions{ClientSessionCache: peer.Sessions}
	peer.Sessions = rec
	first := p.request(st, mode)
	first.Peer = peer
	r1 := exchange(ctx, p.Protocol, first)
	if r1.Status != measure.StatusOK {
		p.Detail["resumption"] = "the first connection ended with " + string(r1.Status)
		return
	}
	p.TicketLifetime = rec.got()
	if p.TicketLifetime == nil {
		p.Detail["resumption"] = "no session ticket on the first connection"
		p.Resumed = boolp(false)
		if p.Protocol == measure.DoQ {
			p.ZeroRTT = boolp(false)
		}
		return
	}
	second := p.request(st, mode)
	second.Peer = peer
	r2 := exchange(ctx, p.Protocol, second)
	if !r2.HasHandshake || r2.Resumed == nil {
		p.Detail["resumption"] = "the second connection ended with " + string(r2.Status)
		return
	}
	p.Resumed = r2.Resumed
	if p.Protocol == measure.DoQ && r2.Used0RTT != nil && r2.Status == measure.StatusOK {
		p.ZeroRTT = r2.Used0RTT
	}
}

// detailJSON is the stored detail.
func (p *Policy) detailJSON() []byte {
	if p.firstExchangeErr != nil {
		p.Detail["error"] = p.firstExchangeErr.Error()
	}
	b, err := json.Marshal(p.Detail)
	if err != nil {
		return []byte(`{}`)
	}
	return b
}
