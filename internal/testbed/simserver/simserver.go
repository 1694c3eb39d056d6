// Package simserver runs the testbed's multi-tenant servers for a population: simquic
// (QUIC/DoQ on 784/853/8853) and simdns (DNS on UDP/TCP 53, DoT on 853, DoH on 443), both
// dispatching per destination address to the behaviour testbed/population.txt assigns.
// cmd/simserver is its thin main; testnet up starts it in the internet namespace.
package simserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/simdns"
	"github.com/doqscan/doqscan/internal/testbed/simquic"
)

// DefaultCert is the certificate DoT/DoH present for hosts whose record names none.
const DefaultCert = "provider-a"

// Config configures Run.
type Config struct {
	Population *population.Population
	// Listen is the address to bind (default 0.0.0.0: every address of the namespace).
	Listen netip.Addr
	// Listen6 is the IPv6 address to bind when the population has an IPv6 half; default
	// [::] (every IPv6 address of the namespace) when Listen is the IPv4 wildcard.
	// NoIPv6 serves IPv4 only.
	Listen6 netip.Addr
	NoIPv6  bool
	// NoQUIC / NoDNS leave one side out (debugging).
	NoQUIC, NoDNS bool
	// QUICPorts and DNSPorts override the ports (tests); nil/zero: the standard ones.
	QUICPorts map[uint16]uint16
	DNSPorts  simdns.Ports
	Logger    *slog.Logger
}

// Servers are the running servers.
type Servers struct {
	QUIC *simquic.Server
	DNS  *simdns.Server
	PKI  *pki.PKI
}

// Start builds the PKI and starts both servers; when it returns without error every
// listener is bound.
func Start(ctx context.Context, cfg Config) (*Servers, error) {
	if cfg.Population == nil {
		return nil, errors.New("simserver: no population")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := pki.New(cfg.Population)
	if err != nil {
		return nil, err
	}
	s := &Servers{PKI: p}
	cfg.Listen, cfg.Listen6 = simquic.ListenAddrs(cfg.Population, cfg.Listen, cfg.Listen6, cfg.NoIPv6)
	if !cfg.NoQUIC {
		s.QUIC, err = simquic.Start(ctx, simquic.Config{Population: cfg.Population, PKI: p, Listen: cfg.Listen,
			Listen6: cfg.Listen6, NoIPv6: !cfg.Listen6.IsValid(),
			Ports: cfg.QUICPorts, Logger: cfg.Logger.With("server", "simquic")})
		if err != nil {
			return nil, err
		}
	}
	if !cfg.NoDNS {
		s.DNS, err = simdns.Start(ctx, simdns.Config{Directory: Directory{cfg.Population},
			Certs: Certs{cfg.Population, p}, Listen: cfg.Listen, Listen6: cfg.Listen6, Ports: cfg.DNSPorts,
			Logger: cfg.Logger.With("server", "simdns")})
		if err != nil {
			if s.QUIC != nil {
				s.QUIC.Close()
			}
			return nil, err
		}
	}
	return s, nil
}

// Wait blocks until ctx ends and both servers have stopped.
func (s *Servers) Wait() error {
	var errs []error
	if s.QUIC != nil {
		errs = append(errs, s.QUIC.Wait())
	}
	if s.DNS != nil {
		errs = append(errs, s.DNS.Wait())
	}
	return errors.Join(errs...)
}

// Directory is the population seen as simdns's Directory.
type Directory struct{ Pop *population.Population }

// dnsClass maps the population's rcode and hostile kind onto simdns's classes.
func dnsClass(r *population.Record) (simdns.Class, bool) {
	if r.Hostile != hostile.None {
		// A kind simdns does not act out (bad-vn, draft-only: QUIC only) gives no DNS service.
		return simdns.HostileClass(r.Hostile)
	}
	switch r.RCode {
	case "REFUSED":
		return simdns.ClassRefused, true
	case "NOERROR":
		return simdns.ClassAnswer, true
	}
	return "", false // SERVFAIL: not served here; the population gives no DNS service there
}

// Behaviour implements simdns.Directory.
func (d Directory) Behaviour(addr netip.Addr, p simdns.Protocol) (simdns.Behaviour, bool) {
	r := d.Pop.Lookup(addr)
	if r == nil || r.Peer != "" {
		return simdns.Behaviour{}, false
	}
	var offered bool
	switch p {
	case simdns.DoUDP:
		offered = r.HasDNS("udp")
	case simdns.DoTCP:
		offered = r.HasDNS("tcp")
	case simdns.DoT:
		offered = r.DoT != 0
	case simdns.DoH:
		offered = r.DoH != 0
	}
	if !offered {
		return simdns.Behaviour{}, false
	}
	c, ok := dnsClass(r)
	if !ok {
		return simdns.Behaviour{}, false
	}
	return simdns.Behaviour{Class: c, Answer: d.Pop.Answer, SessionTickets: true, Keepalive: r.Hostile == "",
		MaxQueries: r.MaxQueries, Idle: r.Idle, DDR: simdns.DDRRecords(d.Pop, addr)}, true
}

// FastOpen implements simdns.Directory: no population host asks for TCP Fast Open yet.
func (d Directory) FastOpen(simdns.Protocol) []netip.Addr { return nil }

// Certs gives DoT/DoH the certificate the population names for the host.
type Certs struct {
	Pop *population.Population
	PKI *pki.PKI
}

// Certificate implements simdns.CertSource.
func (c Certs) Certificate(addr netip.Addr, _ simdns.Protocol, _ string) (*tls.Certificate, error) {
	r := c.Pop.Lookup(addr)
	if r == nil {
		return nil, fmt.Errorf("simserver: %s is silent", addr)
	}
	name := r.Cert
	if name == "" {
		name = DefaultCert
	}
	return c.PKI.Certificate(name)
}
