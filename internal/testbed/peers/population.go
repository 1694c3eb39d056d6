package peers

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// peerKinds maps the population's peer= values to stacks.
var peerKinds = map[string]Kind{
	population.PeerCoreDNS:  CoreDNS,
	population.PeerHickory:  Hickory,
	population.PeerAioquic:  Aioquic,
	population.PeerNgtcp2:   Ngtcp2,
	population.PeerDNSProxy: DNSProxy,
	population.PeerLazyDNS:  LazyDNS,
}

// dnsPort is plain DNS (RFC 1035 §4.2).
const dnsPort = 53

// FromPopulation returns one Spec per address whose record has a peer= key, with the
// services the record lists. Certificates are <certDir>/<cert>.crt and .key, as
// pki.WriteDir writes them. aioquic and dnsproxy forward to the first CoreDNS peer serving UDP/53,
// else to the first well-behaved NOERROR plain-DNS address of the population.
func FromPopulation(pop *population.Population, certDir string) ([]Spec, error) {
	upstream, err := upstreamFor(pop)
	if err != nil {
		return nil, err
	}
	var specs []Spec
	for _, rec := range pop.AllRecords() {
		if rec.Peer == "" {
			continue
		}
		more, err := specsOf(rec, upstream, certDir)
		if err != nil {
			return nil, err
		}
		specs = append(specs, more...)
	}
	return specs, nil
}

// specsOf is the spec of every address of a peer record (either family).
func specsOf(r *population.Record, upstream netip.AddrPort, certDir string) ([]Spec, error) {
	var specs []Spec
	for addr := range r.Addrs {
		kind, ok := peerKinds[r.Peer]
		if !ok {
			return nil, fmt.Errorf("peers: %v (line %d): unknown peer %q", addr, r.Line, r.Peer)
		}
		if r.DoH3 != 0 && kind != DNSProxy {
			return nil, fmt.Errorf("peers: %v (line %d): %s does not serve DoH over HTTP/3 here", addr, r.Line, kind)
		}
		s := Spec{Kind: kind, Addr: addr, DoTPort: r.DoT, DoHPort: r.DoH, DoH3Port: r.DoH3,
			QUICPorts: slices.Clone(r.QUICPorts), Retry: r.Retry}
		switch {
		case r.HasDNS("udp") && r.HasDNS("tcp"):
			s.DNSPort = dnsPort
		case r.HasDNS("udp") || r.HasDNS("tcp"):
			return nil, fmt.Errorf("peers: %v (line %d): a %s peer serves DNS on UDP and TCP together", addr, r.Line, kind)
		}
		if r.Cert != "" {
			s.CertFile = filepath.Join(certDir, r.Cert+".crt")
			s.KeyFile = filepath.Join(certDir, r.Cert+".key")
		}
		if kind == Aioquic || kind == DNSProxy {
			s.Upstream = upstream
		}
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("%w (population line %d)", err, r.Line)
		}
		specs = append(specs, s)
	}
	return specs, nil
}

func upstreamFor(pop *population.Population) (netip.AddrPort, error) {
	var fallback netip.AddrPort
	for addr, r := range pop.Hosts {
		if !r.HasDNS("udp") || r.Hostile != "" || (r.RCode != "" && r.RCode != "NOERROR") {
			continue
		}
		if r.Peer == population.PeerCoreDNS {
			return netip.AddrPortFrom(addr, dnsPort), nil
		}
		if r.Peer == "" && !fallback.IsValid() {
			fallback = netip.AddrPortFrom(addr, dnsPort)
		}
	}
	if fallback.IsValid() {
		return fallback, nil
	}
	for _, r := range pop.Records {
		if r.Peer == population.PeerAioquic || r.Peer == population.PeerDNSProxy {
			return netip.AddrPort{}, fmt.Errorf("peers: %s needs an upstream DNS server, and the population has none", r.Peer)
		}
	}
	return netip.AddrPort{}, nil
}

// StartAll starts every peer of the population for testbed instance inst, with the
// repository root from the project home (internal/home). See StartPopulation.
func StartAll(ctx context.Context, inst string, pop *population.Population, certDir string, log *slog.Logger) (stop func() error, err error) {
	return StartPopulation(ctx, Config{Inst: inst, Log: log}, pop, certDir)
}

// StartPopulation starts every peer of the population: it writes the population's
// certificates to certDir (default <RunDir>/certs) with package pki, creates the
// `<inst>-peers` namespace routed from `<inst>-inet`, starts each server and waits until
// each answers a real query or handshake. cfg.Answer/AnswerTTL default to the
// population's. It is idempotent: when every peer recorded in the pid files still runs
// and answers, it leaves them alone; otherwise it stops what is left and starts afresh.
// The peers keep running after the caller exits; stop ends them, as do StopInstance and
// `testnet down` (which ends every process in the instance's namespaces).
func StartPopulation(ctx context.Context, cfg Config, pop *population.Population, certDir string) (stop func() error, err error) {
	if !cfg.Answer.IsValid() {
		cfg.Answer, cfg.AnswerTTL = pop.Answer, pop.AnswerTTL
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if certDir == "" {
		certDir = filepath.Join(cfg.RunDir, "certs")
	}
	specs, err := FromPopulation(pop, certDir)
	if err != nil {
		return nil, err
	}
	specs = slices.DeleteFunc(specs, func(s Spec) bool {
		if err := Installed(cfg.Root, s.Kind); Optional[s.Kind] && err != nil {
			cfg.Log.Info("optional peer not installed: its address stays silent", "peer", s.Kind, "addr", s.Addr, "err", err)
			return true
		}
		return false
	})
	stopInstance := func() error { return StopInstance(cfg.Inst, cfg.RunDir, cfg.Log) }
	if len(specs) == 0 {
		cfg.Log.Info("population has no third-party peers")
		return func() error { return nil }, nil
	}
	if cfg.Inst != "" && alreadyRunning(ctx, cfg, specs) {
		cfg.Log.Info("peers already running", "count", len(specs), "dir", cfg.RunDir)
		return stopInstance, nil
	}
	if err := stopInstance(); err != nil {
		return nil, err
	}
	p, err := pki.New(pop)
	if err != nil {
		return nil, fmt.Errorf("peers: certificates: %w", err)
	}
	if err := p.WriteDir(certDir); err != nil {
		return nil, fmt.Errorf("peers: certificates: %w", err)
	}
	set, err := Start(ctx, cfg, specs)
	if err != nil {
		return nil, err
	}
	return set.Stop, nil
}

// alreadyRunning reports whether every spec has a live process (pid file) and every
// service answers.
func alreadyRunning(ctx context.Context, cfg Config, specs []Spec) bool {
	if _, err := os.Stat("/run/netns/" + cfg.Inst + "-peers"); err != nil {
		return false
	}
	for _, s := range specs {
		if !pidAlive(filepath.Join(cfg.RunDir, s.Name()+".pid")) {
			return false
		}
		for _, svc := range s.Services() {
			if Probe(ctx, cfg.Inst+"-inet", s.Addr, svc, cfg.Answer) != nil {
				return false
			}
		}
	}
	return true
}

// Missing returns the peer kinds the records name whose binaries are missing under root,
// and how many of the records they serve, or nil and 0 when every one is installed.
func Missing(root string, records []*population.Record) (kinds []Kind, addresses int) {
	missing := map[Kind]bool{}
	for _, r := range records {
		if r.Peer == "" {
			continue
		}
		k := Kind(r.Peer)
		if _, seen := missing[k]; !seen {
			missing[k] = Installed(root, k) != nil
		}
		if missing[k] {
			addresses++
		}
	}
	for _, k := range Kinds {
		if missing[k] {
			kinds = append(kinds, k)
		}
	}
	return kinds, addresses
}
