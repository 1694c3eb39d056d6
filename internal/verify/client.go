// Package verify tells which QUIC hosts found by a scan speak DNS over QUIC: it
// connects to each (address, port) with quic-go offering every DoQ ALPN, answers
// Version Negotiation, retries with server names when the handshake suggests SNI is
// needed, sends a real DNS query framed as the negotiated DoQ version requires, and
// records the outcome, versions, TLS parameters, certificate chain and location.
package verify

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/certs"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// SNI sources (verification_results.sni_source).
const (
	SNINone = "none" // no server name sent
	SNIList = "list" // a name from the configured list
	SNISAN  = "san"  // a name from the certificate the server showed without SNI
)

// Defaults, as the study where it said (2 s handshake timeout).
const (
	DefaultHandshakeTimeout = 2 * time.Second
	DefaultQueryTimeout     = 2 * time.Second
	DefaultTargetTimeout    = 10 * time.Second
	DefaultMaxSNIAttempts   = 6
	// MaxReply bounds what we read from a DoQ stream: one DNS message plus its prefix
	// (RFC 9250 §4.2). An endless stream costs at most this and the query timeout.
	MaxReply = doq.MaxMessageSize + 2
)

// Config says how targets are verified.
type Config struct {
	ALPNs            []string       // offered, highest first; default doq.ALPNs()
	Versions         []quic.Version // default v1, v2
	HandshakeTimeout time.Duration  // per attempt
	QueryTimeout     time.Duration  // for the DNS exchange after the handshake
	TargetTimeout    time.Duration  // everything for one target, retries included
	QueryName        string         // A query, RD set
	SNINames         []string       // names to retry with when SNI seems required
	MaxSNIAttempts   int            // retries with names, per target
	Roots            *x509.CertPool // for cert_valid_for_sni; nil: system pool
	// NoIdentify skips the QUIC library identification (the qlog of each attempt and the
	// probe offering UnknownALPN): Result.Stack stays nil.
	NoIdentify bool
	// Now is the clock for certificate validity (tests); nil: time.Now.
	Now func() time.Time
}

// Limits of the per-target settings (the flags' ranges), checked by Validate.
const (
	MinTimeout        = time.Millisecond // --handshake-timeout, --query-timeout, --target-timeout
	MaxTimeout        = 5 * time.Minute
	MaxSNIAttemptsCap = 16 // --max-sni-attempts
)

// Validate checks the settings: every timeout in 1ms..MaxTimeout, the SNI attempts in
// 1..MaxSNIAttemptsCap, DoQ ALPNs, host names. Zero values are not accepted (New fills
// them with the defaults first); errors are usage errors naming the flag.
func (c *Config) Validate() error {
	if err := cli.FirstError(
		cli.InRange("handshake-timeout", c.HandshakeTimeout, MinTimeout, MaxTimeout),
		cli.InRange("query-timeout", c.QueryTimeout, MinTimeout, MaxTimeout),
		cli.InRange("target-timeout", c.TargetTimeout, MinTimeout, MaxTimeout),
		cli.InRange("max-sni-attempts", c.MaxSNIAttempts, 1, MaxSNIAttemptsCap),
	); err != nil {
		return err
	}
	for _, a := range c.ALPNs {
		if _, err := doq.FramingFor(a); err != nil {
			return cli.Usagef("--alpns: ALPN %q: %v (known: %s)", a, err, strings.Join(doq.ALPNs(), ","))
		}
	}
	for _, n := range c.SNINames {
		if _, ok := dns.IsDomainName(n); !ok || n == "" || net.ParseIP(n) != nil {
			return cli.Usagef("--sni-names: %q is not a host name", n)
		}
	}
	if _, ok := dns.IsDomainName(c.QueryName); !ok || c.QueryName == "" {
		return cli.Usagef("--query-name: %q is not a domain name", c.QueryName)
	}
	return nil
}

func (c *Config) setDefaults() {
	if len(c.ALPNs) == 0 {
		c.ALPNs = doq.ALPNs()
	}
	if len(c.Versions) == 0 {
		c.Versions = []quic.Version{quic.Version1, quic.Version2}
	}
	c.HandshakeTimeout = cmp.Or(c.HandshakeTimeout, DefaultHandshakeTimeout)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, DefaultQueryTimeout)
	c.TargetTimeout = cmp.Or(c.TargetTimeout, DefaultTargetTimeout)
	c.QueryName = cmp.Or(c.QueryName, dnsmsg.DefaultQueryName)
	c.MaxSNIAttempts = cmp.Or(c.MaxSNIAttempts, DefaultMaxSNIAttempts)
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Target is one (address, port) to verify, with the versions its scan reply advertised.
type Target struct {
	Addr         netip.AddrPort
	ScanVersions []int64
	// ServerName (a targets file's sni=) is tried when a name seems required, after
	// the names of the certificate and before Config.SNINames.
	ServerName string
}

// Result is the verification of one target.
type Result struct {
	Target
	Outcome     Outcome
	Detail      string
	QUICVersion uint32 // 0: no handshake
	ALPN        string
	TLSVersion  uint16
	TLSCipher   string
	Handshake   time.Duration
	SNI         string
	SNISource   string
	Chain       []*x509.Certificate // leaf first, as the server sent it
	CertValid   *bool               // chain verifies against the roots and names the SNI (or the address)
	Rcode       *int
	Answers     int
	Attempts    int
	At          time.Time
	// Stack is the QUIC library identification (nil: identification off, or the server
	// showed nothing of its stack).
	Stack *Stack
}

// Verifier verifies targets; it is safe for concurrent use.
type Verifier struct {
	cfg   Config
	query dnsmsg.Query
	wire  []byte // the packed query
	valid validCache
}

// validCache remembers chain validations by (chain fingerprints, name): hosts of one
// operator share certificates, and x509 verification is a large part of a loopback
// verification's CPU. Bounded; the validity time is taken as constant within a run.
type validCache struct {
	mu sync.Mutex
	m  map[string]bool
}

const validCacheMax = 100000

func (v *Verifier) validFor(chain []*x509.Certificate, name string) bool {
	var k strings.Builder
	for _, c := range chain {
		k.Write(certs.Fingerprint(c.Raw))
	}
	k.WriteString(name)
	key := k.String()
	v.valid.mu.Lock()
	ok, hit := v.valid.m[key]
	v.valid.mu.Unlock()
	if hit {
		return ok
	}
	ok, _ = certs.ValidFor(chain, name, v.cfg.Roots, v.cfg.Now())
	v.valid.mu.Lock()
	if v.valid.m == nil {
		v.valid.m = map[string]bool{}
	}
	if len(v.valid.m) < validCacheMax {
		v.valid.m[key] = ok
	}
	v.valid.mu.Unlock()
	return ok
}

// New checks cfg and builds a verifier.
func New(cfg Config) (*Verifier, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Roots == nil {
		p, err := certs.LoadPool("")
		if err != nil {
			return nil, err
		}
		cfg.Roots = p
	}
	// RFC 9250 §4.2.1: the Message ID MUST be 0 on DoQ.
	q := dnsmsg.Query{Name: cfg.QueryName, Type: dns.TypeA, ID: 0}
	wire, err := dnsmsg.Build(q)
	if err != nil {
		return nil, err
	}
	return &Verifier{cfg: cfg, query: q, wire: wire}, nil
}

// Config returns the effective configuration (defaults filled in).
func (v *Verifier) Config() Config { return v.cfg }

// attempt is one connection attempt with one server name.
type attempt struct {
	sni      string
	outcome  Outcome
	detail   string
	err      error // handshake error, if the handshake failed
	hsDone   bool
	res      Result
	certSeen []*x509.Certificate
	view     *qlogana.ServerView // what the attempt's qlog shows of the server (identification on)
}

// Verify verifies one target. It never returns without an outcome and never takes
// longer than the target timeout (plus scheduling).
func (v *Verifier) Verify(ctx context.Context, t Target) Result {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.TargetTimeout)
	defer cancel()
	if v.cfg.NoIdentify {
		return v.verify(ctx, t, nil)
	}
	var views []attemptView
	r := v.verify(ctx, t, &views)
	var ev StackEvidence
	var noALPN *qlogana.ServerView
	for _, a := range views {
		// The attempt that got furthest: its handshake completed, else the first that
		// heard from the server.
		if vw := a.view; vw != nil && (ev.Handshake == nil || vw.Params != nil && ev.Handshake.Params == nil) {
			ev.Handshake = vw
		}
		if a.noALPN {
			noALPN = a.view
		}
	}
	if noALPN != ev.Handshake {
		ev.NoALPN = noALPN // how it refused a ClientHello without ALPN
	}
	for _, sv := range t.ScanVersions {
		ev.VN = append(ev.VN, uint32(sv))
	}
	st := Identify(ev)
	if st.Library == LibraryUnknown && (ev.Handshake != nil || len(ev.VN) > 0) {
		// The verification's own handshakes left it undecided: one handshake offering an
		// ALPN no server speaks (how it refuses differs between stacks), and for a server
		// that refuses every ALPN we offered, one offering h3 (its transport parameters).
		ev.UnknownALPN = v.probeUnknownALPN(ctx, t)
		if ev.Handshake == nil || ev.Handshake.Params == nil {
			if u := ev.UnknownALPN; u != nil && u.Close != nil && u.Close.TLSAlert != nil && *u.Close.TLSAlert == alertNoApplicationProto {
				if h := v.probeALPN(ctx, t, IdentifyALPN); h != nil && h.Params != nil {
					ev.Handshake = h
				}
			}
		}
		st = Identify(ev)
	}
	if !ev.Empty() {
		r.Stack = &st
	}
	return r
}

// attemptView is what one attempt's qlog showed of the server, and whether the attempt
// offered no ALPN.
type attemptView struct {
	view   *qlogana.ServerView
	noALPN bool
}

// verify is Verify without the identification; views, when not nil, receives what each
// attempt's qlog showed of the server.
func (v *Verifier) verify(ctx context.Context, t Target, views *[]attemptView) Result {
	try := func(ctx context.Context, t Target, sni string, alpns []string) *attempt {
		a := v.try(ctx, t, sni, alpns, views != nil)
		if views != nil {
			*views = append(*views, attemptView{view: a.view, noALPN: len(alpns) == 0})
		}
		return a
	}
	start := time.Now()
	first := try(ctx, t, "", v.cfg.ALPNs)
	res := first.result(t, SNINone)
	res.Attempts = 1
	if refusesEveryALPN(first.err) {
		return v.retryWithoutALPN(ctx, t, res, start, try)
	}
	if first.hsDone || !suggestsSNI(first.err, len(first.certSeen) > 0) {
		res.At = start
		return res
	}
	// The handshake without SNI failed in a way that suggests a name is required.
	type cand struct{ name, source string }
	var cands []cand
	seen := map[string]bool{}
	if len(first.certSeen) > 0 {
		for _, n := range first.certSeen[0].DNSNames {
			n = strings.TrimPrefix(n, "*.") // a wildcard's parent name is a fair guess
			if !seen[n] && n != "" {
				seen[n] = true
				cands = append(cands, cand{n, SNISAN})
			}
		}
	}
	for _, n := range append([]string{t.ServerName}, v.cfg.SNINames...) {
		if n != "" && !seen[n] {
			seen[n] = true
			cands = append(cands, cand{n, SNIList})
		}
	}
	var tried []string
	for _, c := range cands {
		if len(tried) >= v.cfg.MaxSNIAttempts || ctx.Err() != nil {
			break
		}
		tried = append(tried, c.name)
		a := try(ctx, t, c.name, v.cfg.ALPNs)
		res.Attempts++
		if a.hsDone {
			r := a.result(t, c.source)
			r.Attempts = res.Attempts
			r.Detail = fmt.Sprintf("%s (without SNI: %s)", r.Detail, first.detail)
			r.At = start
			return r
		}
	}
	res.At = start
	alert, _, _ := tlsAlert(first.err)
	if alert == alertUnrecognizedName {
		res.Outcome = OutcomeSNIRequired
	}
	if len(tried) == 0 {
		res.Detail += "; no server name to retry with"
	} else {
		res.Detail += fmt.Sprintf("; retried with %d name(s) %s, none completed the handshake", len(tried), strings.Join(tried, ","))
	}
	return res
}

// refusesEveryALPN says whether a handshake failed because the server refused every
// ALPN we offered: its TLS alert no_application_protocol (120, QUIC CRYPTO_ERROR 0x178).
func refusesEveryALPN(err error) bool {
	alert, remote, ok := tlsAlert(err)
	return ok && remote && alert == alertNoApplicationProto
}

// retryWithoutALPN makes one more attempt offering no ALPN at all, for a server that
// refused every DoQ ALPN (res, the quic-not-doq result of the first attempt): some
// servers accept only such connections (rustls/quinn with no ALPN configured refuse any
// offered protocol). If the handshake completes and a DNS query framed as RFC 9250
// (doq.NoALPNFraming) gets a well-formed reply, the target is doq-no-alpn with that
// connection's records (ALPN empty); otherwise it stays quic-not-doq, its detail saying
// what the attempt without ALPN met.
func (v *Verifier) retryWithoutALPN(ctx context.Context, t Target, res Result, start time.Time,
	try func(context.Context, Target, string, []string) *attempt) Result {
	a := try(ctx, t, "", nil)
	res.Attempts++
	res.At = start
	if a.hsDone && a.outcome == OutcomeDoQNoALPN {
		r := a.result(t, SNINone)
		r.Attempts, r.At = res.Attempts, start
		r.Detail = fmt.Sprintf("%s (with every DoQ ALPN: %s)", r.Detail, res.Detail)
		return r
	}
	res.Detail += "; without ALPN: " + a.detail
	return res
}

func (a *attempt) result(t Target, source string) Result {
	r := a.res
	r.Target = t
	r.Outcome, r.Detail = a.outcome, a.detail
	if a.hsDone && a.sni != "" {
		r.SNI, r.SNISource = a.sni, source
	} else {
		r.SNISource = SNINone
	}
	if r.Chain == nil {
		r.Chain = a.certSeen
	}
	return r
}

// connectedConn is a net.PacketConn over a connected UDP socket: the kernel then
// reports ICMP port unreachable as ECONNREFUSED on the next read, which an unconnected
// socket never sees, so a closed port is "unreachable", not a 2 s timeout. It hides
// the UDPConn's OOB methods on purpose (quic-go would use WriteMsgUDP with an address,
// which a connected socket refuses).
type connectedConn struct {
	c     *net.UDPConn
	raddr net.Addr
}

func (c *connectedConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := c.c.Read(b)
	return n, c.raddr, err
}
func (c *connectedConn) WriteTo(b []byte, _ net.Addr) (int, error) { return c.c.Write(b) }
func (c *connectedConn) Close() error                              { return c.c.Close() }
func (c *connectedConn) LocalAddr() net.Addr                       { return c.c.LocalAddr() }
func (c *connectedConn) SetDeadline(t time.Time) error             { return c.c.SetDeadline(t) }
func (c *connectedConn) SetReadDeadline(t time.Time) error         { return c.c.SetReadDeadline(t) }
func (c *connectedConn) SetWriteDeadline(t time.Time) error        { return c.c.SetWriteDeadline(t) }

// SetReadBuffer and SetWriteBuffer keep the kernel's default socket buffers: one
// verification exchanges a few packets, and quic-go's 7 MB per socket would cost
// memory at hundreds of parallel targets for nothing. (They also silence quic-go's
// buffer-size warning.)
func (c *connectedConn) SetReadBuffer(int) error  { return nil }
func (c *connectedConn) SetWriteBuffer(int) error { return nil }

// try makes one connection attempt with server name sni ("" = none) offering alpns (none
// at all when empty) and, if the handshake completes, one DNS exchange. With traced, the
// attempt's qlog is kept and read for what it shows of the server (attempt.view).
func (v *Verifier) try(ctx context.Context, t Target, sni string, alpns []string, traced bool) *attempt {
	var q *qlogCapture
	if traced {
		q = &qlogCapture{}
	}
	a := v.tryConn(ctx, t, sni, alpns, q)
	if q != nil {
		a.view = q.view()
	}
	return a
}

func (v *Verifier) tryConn(ctx context.Context, t Target, sni string, alpns []string, q *qlogCapture) *attempt {
	a := &attempt{sni: sni}
	raddr := net.UDPAddrFromAddrPort(t.Addr)
	uc, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		a.err = err
		a.outcome, a.detail = classifyHandshake(err)
		return a
	}
	// Deferred first, so it runs last: quic.Transport.Close leaves open a socket it did
	// not create.
	defer uc.Close()
	tr := &quic.Transport{Conn: &connectedConn{c: uc, raddr: raddr}}
	defer tr.Close()

	var mu sync.Mutex
	tlsConf := &tls.Config{
		// We verify the chain ourselves after the handshake (cert_valid_for_sni): a scan
		// must see every server, valid certificate or not.
		InsecureSkipVerify: true,
		NextProtos:         alpns,
		MinVersion:         tls.VersionTLS13,
		VerifyConnection: func(cs tls.ConnectionState) error {
			mu.Lock()
			a.certSeen = cs.PeerCertificates
			mu.Unlock()
			return nil
		},
	}
	if sni != "" {
		tlsConf.ServerName = sni
	} else {
		// quic-go fills an empty ServerName with the address; crypto/tls never sends
		// an IP literal as SNI (RFC 6066 §3), so this sends no SNI, as the study did.
		tlsConf.ServerName = t.Addr.Addr().Unmap().String()
	}
	qconf := &quic.Config{
		Versions:             v.cfg.Versions,
		HandshakeIdleTimeout: v.cfg.HandshakeTimeout,
		MaxIdleTimeout:       v.cfg.QueryTimeout + v.cfg.HandshakeTimeout,
	}
	if q != nil {
		qconf.Tracer = q.tracer
	}
	hctx, hcancel := context.WithTimeout(ctx, v.cfg.HandshakeTimeout)
	defer hcancel()
	t0 := time.Now()
	conn, err := tr.Dial(hctx, raddr, tlsConf, qconf)
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		a.err = err
		a.outcome, a.detail = classifyHandshake(err)
		return a
	}
	a.hsDone = true
	a.res.Handshake = time.Since(t0)
	defer conn.CloseWithError(doq.CodeNoError, "") //nolint:errcheck // the answer is in hand; a failed close changes nothing
	st := conn.ConnectionState()
	a.res.QUICVersion = uint32(st.Version)
	a.res.ALPN = st.TLS.NegotiatedProtocol
	a.res.TLSVersion = st.TLS.Version
	a.res.TLSCipher = tls.CipherSuiteName(st.TLS.CipherSuite)
	a.res.Chain = st.TLS.PeerCertificates
	name := sni
	if name == "" {
		name = t.Addr.Addr().Unmap().String()
	}
	if len(a.res.Chain) > 0 {
		ok := v.validFor(a.res.Chain, name)
		a.res.CertValid = &ok
	}
	framing, err := doq.FramingFor(a.res.ALPN)
	noALPN := len(alpns) == 0 && a.res.ALPN == ""
	if noALPN {
		framing, err = doq.NoALPNFraming, nil
	}
	if err != nil {
		a.outcome, a.detail = OutcomeQUICNotDoQ, fmt.Sprintf("server selected ALPN %q", a.res.ALPN)
		return a
	}
	var qerr error
	a.outcome, a.detail, a.res.Rcode, a.res.Answers, qerr = v.exchange(ctx, conn, framing)
	if noALPN && a.res.Rcode != nil && isResolverOutcome(a.outcome) {
		// A well-formed reply (any rcode, kept in dns_rcode) without any ALPN.
		a.outcome, a.detail = OutcomeDoQNoALPN, fmt.Sprintf("no ALPN, %s framing (RFC 9250): %s", framing, a.detail)
	}
	if _, _, ok := tlsAlert(qerr); ok {
		// A TLS alert after Dial returned: the client had sent its Finished but the
		// server rejected the handshake (TLS 1.3 client authentication, RFC 8446 §4.4.2).
		// The handshake never completed: classify it as a handshake failure.
		a.hsDone = false
		a.err = qerr
		a.outcome, a.detail = classifyHandshake(qerr)
		a.res = Result{}
	}
	return a
}

// exchange sends the query on a new stream and classifies the reply.
func (v *Verifier) exchange(ctx context.Context, conn *quic.Conn, f doq.Framing) (o Outcome, detail string, rcode *int, answers int, err error) {
	deadline := time.Now().Add(v.cfg.QueryTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	qctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	msg, err := doq.Exchange(qctx, conn, f, v.wire, doq.ExchangeOptions{Limit: MaxReply})
	var xe *doq.ExchangeError
	if errors.As(err, &xe) {
		if errors.Is(err, doq.ErrMessageTooLarge) {
			return OutcomeProtocolError, xe.Err.Error(), nil, 0, xe.Err
		}
		step := string(xe.Step)
		if xe.Step == doq.StepRead {
			step = fmt.Sprintf("read reply (%s)", f)
		}
		return queryFailure(xe.Err), step + ": " + classifyQuery(xe.Err), nil, 0, xe.Err
	}
	resp, cerr := dnsmsg.Validate(v.query, msg)
	if cerr != nil {
		// RFC 9250 §4.3.3: a malformed or unexpected message (non-zero ID, question not
		// ours, not DNS at all, cut short) is a protocol error.
		return OutcomeProtocolError, fmt.Sprintf("bad reply (%s, %d bytes): %v", f, len(msg), cerr), nil, 0, nil
	}
	r := resp.Msg
	rc := r.Rcode
	d := fmt.Sprintf("%s, %d answer(s)", dnsmsg.RcodeName(rc), len(r.Answer))
	switch rc {
	case dns.RcodeSuccess, dns.RcodeNameError:
		return OutcomeVerified, d, &rc, len(r.Answer), nil
	case dns.RcodeRefused:
		return OutcomeRefused, d, &rc, len(r.Answer), nil
	}
	return OutcomeDNSError, d, &rc, len(r.Answer), nil
}
