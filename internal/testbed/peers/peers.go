// Package peers runs the testbed's third-party DNS/DoQ/QUIC servers: CoreDNS (quic-go),
// hickory-dns (quinn, Rust), aioquic's DoQ example server (Python) and ngtcp2's example
// server (C, non-DoQ QUIC) and AdGuard dnsproxy (quic-go; the server of AdGuard Home). Each one serves exactly the population address(es) it is
// given, with a generated configuration answering test.com from a local zone and never
// forwarding anywhere outside the testbed.
//
// Where they run: the internet namespace `<inst>-inet` owns 198.19.0.0/16 through an
// AnyIP route, and the project's own servers listen there on wildcard sockets
// (0.0.0.0:port). Linux refuses a specific-address bind next to a wildcard bind on the
// same port unless BOTH sockets set SO_REUSEADDR (UDP) or SO_REUSEPORT (UDP and TCP),
// which third-party servers do not do (tried on this machine; see docs/peers.md). So the
// peers run in a namespace of their own, `<inst>-peers`, linked to `<inst>-inet` by a
// veth pair: each peer address is on the peers' loopback, and `<inst>-inet` gets a /32
// route for it in its local table, which wins over the AnyIP /16 by longest prefix. From
// the vantage point nothing differs (same delay line, same addresses; one more hop).
//
// With Config.Inst empty, servers run in the caller's namespace (loopback addresses),
// which is how testbed/tools/capturevn captures Version Negotiation packets.
package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/testbed/proc"
)

// Kind names a third-party server implementation.
type Kind string

// The third-party stacks the testbed runs.
const (
	CoreDNS Kind = "coredns" // CoreDNS v1.15.0: DoUDP/DoTCP/DoT/DoH/DoQ on quic-go
	Hickory Kind = "hickory" // hickory-dns 0.26.3: DoUDP/DoTCP/DoT/DoQ on quinn
	Aioquic Kind = "aioquic" // aioquic 1.7.2 examples/doq_server.py: DoQ (optionally always Retry)
	Ngtcp2  Kind = "ngtcp2"  // ngtcp2 0.12 gtlsserver: HTTP/3 QUIC, not DoQ
	// DNSProxy is AdGuard dnsproxy v0.78.0: DoUDP/DoTCP/DoT/DoH/DoH3/DoQ on quic-go.
	DNSProxy Kind = "dnsproxy"
	// LazyDNS is lazydns 0.2.63 (Rust): DoQ on quinn without an ALPN (doq-no-alpn).
	LazyDNS Kind = "lazydns"
)

// Kinds lists every stack, in start order (aioquic and dnsproxy forward to a DNS
// server, so the stacks that answer from a zone start first).
var Kinds = []Kind{CoreDNS, Hickory, Ngtcp2, DNSProxy, Aioquic, LazyDNS}

// Optional are the stacks whose install is too long for every machine (lazydns: about
// 25 minutes of cargo build on 2 cores the first time): scripts/install-peers.sh installs
// them only when named (`scripts/install-peers.sh lazydns`), the testbed starts them
// when they are installed and otherwise leaves their addresses silent, and a test of
// such an address skips and says why (testbed.RequirePeer). The others are started all
// or none.
var Optional = map[Kind]bool{LazyDNS: true}

// Versions are the versions scripts/install-peers.sh installs.
var Versions = map[Kind]string{
	CoreDNS:  "1.15.0",
	Hickory:  "0.26.3",
	Aioquic:  "1.7.2",
	Ngtcp2:   "0.12.1 (Debian bookworm)",
	DNSProxy: "0.78.0",
	LazyDNS:  "0.2.63",
}

// Spec is one third-party server at one address. A zero port means "not served".
type Spec struct {
	Kind Kind
	Addr netip.Addr // the address it binds (never the unspecified address)

	DNSPort uint16 // DoUDP and DoTCP (RFC 1035)
	DoTPort uint16 // DNS over TLS (RFC 7858)
	DoHPort uint16 // DNS over HTTPS (RFC 8484), path /dns-query
	// DoH3Port: DoH over HTTP/3 (RFC 9114), UDP; dnsproxy only, on its DoHPort.
	DoH3Port uint16
	// QUICPorts: DoQ (RFC 9250) for CoreDNS/hickory/aioquic/dnsproxy; HTTP/3 for ngtcp2.
	// Only CoreDNS and dnsproxy serve more than one.
	QUICPorts []uint16

	Retry bool // always send Retry (aioquic --retry, ngtcp2 -V)

	// CertFile is a PEM certificate chain (leaf first), KeyFile its PEM private key.
	CertFile, KeyFile string

	// Upstream is where aioquic's doq_server and dnsproxy forward queries (UDP). It must
	// be a testbed or loopback address: both default to public resolvers.
	Upstream netip.AddrPort
}

// Name is a file-name-safe identifier of the spec: "<kind>-<addr>".
func (s Spec) Name() string { return string(s.Kind) + "-" + s.Addr.String() }

func (s Spec) validate() error {
	switch {
	case !slices.Contains(Kinds, s.Kind):
		return fmt.Errorf("peers: unknown kind %q", s.Kind)
	case !s.Addr.IsValid() || s.Addr.IsUnspecified() || s.Addr.Is4In6():
		return fmt.Errorf("peers: %s: need a specific IPv4 or IPv6 address, got %v", s.Kind, s.Addr)
	case !testbedOrLoopback(s.Addr):
		return fmt.Errorf("peers: %s: address %v is outside 198.18.0.0/15, 2001:2::/48, 127.0.0.0/8 and ::1", s.Kind, s.Addr)
	case s.needsTLS() && (s.CertFile == "" || s.KeyFile == ""):
		return fmt.Errorf("peers: %s at %v: TLS/QUIC service needs CertFile and KeyFile", s.Kind, s.Addr)
	case (s.Kind == Aioquic || s.Kind == Ngtcp2 || s.Kind == LazyDNS) && len(s.QUICPorts) == 0:
		return fmt.Errorf("peers: %s at %v: a QUIC port is required", s.Kind, s.Addr)
	case s.Kind != CoreDNS && s.Kind != DNSProxy && len(s.QUICPorts) > 1:
		return fmt.Errorf("peers: %s at %v serves one QUIC port, not %v", s.Kind, s.Addr, s.QUICPorts)
	case slices.Contains(s.QUICPorts, 0):
		return fmt.Errorf("peers: %s at %v: QUIC port 0", s.Kind, s.Addr)
	case (s.Kind == Aioquic || s.Kind == DNSProxy) && (!s.Upstream.IsValid() || !testbedOrLoopback(s.Upstream.Addr())):
		return fmt.Errorf("peers: %s at %v: Upstream %v must be a testbed or loopback address", s.Kind, s.Addr, s.Upstream)
	case s.DoH3Port != 0 && (s.Kind != DNSProxy || s.DoH3Port != s.DoHPort):
		return fmt.Errorf("peers: %s at %v: DoH3 on %d: only dnsproxy serves it, on its DoH port (%d)", s.Kind, s.Addr, s.DoH3Port, s.DoHPort)
	case s.Kind == DNSProxy && s.DNSPort == 0:
		return fmt.Errorf("peers: dnsproxy at %v always serves plain DNS: set DNSPort", s.Addr)
	case s.Kind == Hickory && s.DoHPort != 0:
		return fmt.Errorf("peers: hickory at %v: DoH is not compiled in (features quic-ring,resolver)", s.Addr)
	case (s.Kind == Aioquic || s.Kind == Ngtcp2 || s.Kind == LazyDNS) && (s.DNSPort != 0 || s.DoTPort != 0 || s.DoHPort != 0):
		return fmt.Errorf("peers: %s at %v serves QUIC only", s.Kind, s.Addr)
	case s.Retry && s.Kind != Aioquic && s.Kind != Ngtcp2:
		return fmt.Errorf("peers: %s at %v cannot be configured to always Retry", s.Kind, s.Addr)
	}
	return nil
}

func (s Spec) needsTLS() bool {
	return s.DoTPort != 0 || s.DoHPort != 0 || s.DoH3Port != 0 || len(s.QUICPorts) > 0
}

// quicPort is the single QUIC port of a non-CoreDNS spec (0 if none).
func (s Spec) quicPort() uint16 {
	if len(s.QUICPorts) == 0 {
		return 0
	}
	return s.QUICPorts[0]
}

var (
	testbedPrefix  = netip.MustParsePrefix("198.18.0.0/15")
	testbedPrefix6 = netip.MustParsePrefix("2001:2::/48")
	loopbackPrefix = netip.MustParsePrefix("127.0.0.0/8")
)

func testbedOrLoopback(a netip.Addr) bool {
	return testbedPrefix.Contains(a) || testbedPrefix6.Contains(a) || loopbackPrefix.Contains(a) || a == netip.IPv6Loopback()
}

// Config says where and how to run the peers.
type Config struct {
	// Inst is the testbed instance: peers run in namespace `<Inst>-peers`, routed from
	// `<Inst>-inet`. Empty: run in the caller's namespace (loopback addresses only).
	Inst string
	// Root is the repository root (bin/coredns, var/peers, .venv). Default: the project
	// home (internal/home).
	Root string
	// RunDir holds configs, logs and pid files. Default: <Root>/var/testnet/<Inst>/peers.
	RunDir string
	// Answer is the A record every peer returns for any name (test.com included), with
	// TTL AnswerTTL (default 300 s).
	Answer    netip.Addr
	AnswerTTL uint32
	// ReadyTimeout bounds the wait for each server to answer (default 60 s: hickory
	// and CoreDNS start in well under a second, but the machine may be loaded).
	ReadyTimeout time.Duration
	Log          *slog.Logger
}

// DefaultAnswer is the A record for test.com when Config.Answer is unset (an address
// of the testbed's internet, so nothing ever leads outside).
var DefaultAnswer = netip.MustParseAddr("198.19.0.1")

// Zone is the name the readiness probes query (A test.com, as in the original study).
const Zone = "test.com."

func (c *Config) fill() error {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if !c.Answer.IsValid() {
		c.Answer = DefaultAnswer
	}
	if c.AnswerTTL == 0 {
		c.AnswerTTL = 300
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 60 * time.Second
	}
	if c.Root == "" {
		r, err := RepoRoot()
		if err != nil {
			return err
		}
		c.Root = r
	}
	if c.RunDir == "" {
		inst := c.Inst
		if inst == "" {
			inst = "loopback"
		}
		c.RunDir = filepath.Join(c.Root, "var", "testnet", inst, "peers")
	}
	return os.MkdirAll(c.RunDir, 0o755)
}

// RepoRoot returns the project home (see internal/home).
func RepoRoot() (string, error) {
	return home.Dir(), nil
}

// ErrNotInstalled is returned (wrapped) when a peer's binary is missing.
var ErrNotInstalled = errors.New("not installed (run scripts/install-peers.sh)")

// Set is a group of running peers.
type Set struct {
	cfg   Config
	procs []*peerProc
	ns    *Namespace
}

// Start writes each spec's configuration, starts it (in the peers namespace when
// cfg.Inst is set) and waits until every service it has answers a real query or
// handshake. On error, whatever was started is stopped again.
func Start(ctx context.Context, cfg Config, specs []Spec) (*Set, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	seen := map[netip.Addr]Kind{}
	for _, s := range specs {
		if err := s.validate(); err != nil {
			return nil, err
		}
		if k, dup := seen[s.Addr]; dup {
			return nil, fmt.Errorf("peers: address %v given to both %s and %s", s.Addr, k, s.Kind)
		}
		seen[s.Addr] = s.Kind
	}
	for _, s := range specs {
		if err := Installed(cfg.Root, s.Kind); err != nil {
			return nil, err
		}
	}
	ordered := slices.Clone(specs)
	slices.SortStableFunc(ordered, func(a, b Spec) int {
		return slices.Index(Kinds, a.Kind) - slices.Index(Kinds, b.Kind)
	})
	set := &Set{cfg: cfg}
	if cfg.Inst != "" {
		addrs := make([]netip.Addr, 0, len(ordered))
		for _, s := range ordered {
			addrs = append(addrs, s.Addr)
		}
		ns, err := SetupNamespace(ctx, cfg.Inst, addrs)
		if err != nil {
			return nil, err
		}
		set.ns = ns
	}
	zone, err := writeZone(cfg.RunDir, cfg.Answer, cfg.AnswerTTL)
	if err != nil {
		set.Stop()
		return nil, err
	}
	for _, s := range ordered {
		p, err := set.startOne(ctx, s, zone)
		if err != nil {
			set.Stop()
			return nil, err
		}
		set.procs = append(set.procs, p)
	}
	return set, nil
}

func (set *Set) startOne(ctx context.Context, s Spec, zone string) (*peerProc, error) {
	argv, err := command(set.cfg, s, zone)
	if err != nil {
		return nil, fmt.Errorf("peers: %s: %w", s.Name(), err)
	}
	t0 := time.Now()
	p, err := launch(set.cfg, s, argv)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, set.cfg.ReadyTimeout)
	defer cancel()
	if err := waitReady(rctx, set.probeNamespace(), s, set.cfg.Answer, p); err != nil {
		p.stop(set.cfg.Log)
		return nil, fmt.Errorf("peers: %s did not become ready: %w (log: %s)", s.Name(), err, p.logPath)
	}
	set.cfg.Log.Info("peer ready", "peer", s.Name(), "pid", p.pid, "ready_ms", time.Since(t0).Milliseconds(),
		"dns", s.DNSPort, "dot", s.DoTPort, "doh", s.DoHPort, "doh3", s.DoH3Port, "quic", s.QUICPorts, "retry", s.Retry, "log", p.logPath)
	return p, nil
}

// probeNamespace is where readiness probes run: the internet namespace (so the probe
// crosses the same route the vantage point's packets take), or the caller's.
func (set *Set) probeNamespace() string {
	if set.cfg.Inst == "" {
		return ""
	}
	return set.cfg.Inst + "-inet"
}

// Processes returns the running peers' processes, in start order.
func (set *Set) Processes() []*proc.Proc {
	out := make([]*proc.Proc, 0, len(set.procs))
	for _, p := range set.procs {
		out = append(out, p.child)
	}
	return out
}

// Stop stops every peer (SIGTERM, then SIGKILL after a grace period) and removes the
// peers namespace and its routes. It is safe to call more than once.
func (set *Set) Stop() error {
	var errs []error
	for i := len(set.procs) - 1; i >= 0; i-- {
		errs = append(errs, set.procs[i].stop(set.cfg.Log))
	}
	set.procs = nil
	if set.ns != nil {
		errs = append(errs, set.ns.Teardown())
		set.ns = nil
	}
	return errors.Join(errs...)
}

// StopInstance stops peers started by another process for instance inst (from their
// pid files under runDir, default <root>/var/testnet/<inst>/peers) and removes the
// peers namespace. `testnet down` calls it; it succeeds when nothing is running.
func StopInstance(inst, runDir string, log *slog.Logger) error {
	cfg := Config{Inst: inst, RunDir: runDir, Log: log}
	if err := cfg.fill(); err != nil {
		return err
	}
	errs := []error{stopFromPidFiles(cfg.RunDir, cfg.Log)}
	if inst != "" {
		errs = append(errs, (&Namespace{inst: inst}).Teardown())
	}
	return errors.Join(errs...)
}

// Binary returns the executable a kind runs (for aioquic: the example script; the
// interpreter is <root>/.venv/bin/python).
func Binary(root string, k Kind) string {
	switch k {
	case CoreDNS:
		return filepath.Join(root, "bin", "coredns")
	case Hickory:
		return filepath.Join(root, "var", "peers", "bin", "hickory-dns")
	case Aioquic:
		return filepath.Join(root, "var", "peers", "aioquic-"+Versions[Aioquic], "examples", "doq_server.py")
	case Ngtcp2:
		return ngtcp2Server
	case DNSProxy:
		return filepath.Join(root, "var", "peers", "bin", "dnsproxy")
	case LazyDNS:
		return filepath.Join(root, "var", "peers", "bin", "lazydns")
	}
	return ""
}

// Installed returns an error wrapping ErrNotInstalled when kind's binary is missing.
func Installed(root string, k Kind) error {
	files := []string{Binary(root, k)}
	if k == Aioquic {
		files = append(files, filepath.Join(root, ".venv", "bin", "python"))
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("peers: %s: %s: %w", k, f, ErrNotInstalled)
		}
	}
	return nil
}
