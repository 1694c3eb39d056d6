package peers

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// peerKinds maps the population's peer= values to stacks.
var peerKinds = map[string]Kind{
	population.PeerCoreDNS: CoreDNS,
	population.PeerHickory: Hickory,
	population.PeerAioquic: Aioquic,
	population.PeerNgtcp2:  Ngtcp2,
}

// dnsPort is plain DNS (RFC 1035 §4.2).
const dnsPort = 53

// FromPopulation returns one Spec per address whose record has a peer= key, with the
// services the record lists. Certificates are <certDir>/<cert>.crt and .key, as
// pki.WriteDir writes them. aioquic forwards to the first CoreDNS peer serving UDP/53,
// else to the first well-behaved NOERROR plain-DNS address of the population.
func FromPopulation(pop *population.Population, certDir string) ([]Spec, error) {
	upstream, err := upstreamFor(pop)
	if err != nil {
		return nil, err
	}
	var specs []Spec
	for addr, r := range pop.Hosts {
		if r.Peer == "" {
			continue
		}
		kind, ok := peerKinds[r.Peer]
		if !ok {
			return nil, fmt.Errorf("peers: %v (line %d): unknown peer %q", addr, r.Line, r.Peer)
		}
		s := Spec{Kind: kind, Addr: addr, DoTPort: r.DoT, DoHPort: r.DoH,
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
		if kind == Aioquic {
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
		if r.Peer == population.PeerAioquic {
			return netip.AddrPort{}, fmt.Errorf("peers: aioquic needs an upstream DNS server, and the population has none")
		}
	}
	return netip.AddrPort{}, nil
}

// StartAll starts every peer of the population for testbed instance inst: it writes the
// population's certificates to certDir (default <root>/var/testnet/<inst>/peers/certs)
// with package pki, creates the `<inst>-peers` namespace routed from `<inst>-inet`,
// starts each server and waits until each answers. The peers keep running after the
// caller exits; stop ends them (as does StopInstance or `testnet down`, which kills
// everything in the instance's namespaces).
func StartAll(ctx context.Context, inst string, pop *population.Population, certDir string, log *slog.Logger) (stop func() error, err error) {
	cfg := Config{Inst: inst, Answer: pop.Answer, AnswerTTL: pop.AnswerTTL, Log: log}
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
	if len(specs) == 0 {
		cfg.Log.Info("population has no third-party peers")
		return func() error { return nil }, nil
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
