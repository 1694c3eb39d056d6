package simdns

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/testbed/population"
)

// DefaultCertProfile is the certificate a DoT/DoH host presents when its population record
// names none.
const DefaultCertProfile = "provider-a"

// CertProfiles gives a certificate chain by population certificate profile name
// (internal/testbed/pki's *PKI satisfies it).
type CertProfiles interface {
	Certificate(name string) (*tls.Certificate, error)
}

// PopulationDirectory serves the behaviours a population file assigns: it is both the
// Directory and the CertSource of a Config.
//
//	d := simdns.NewPopulationDirectory(pop, pkiInstance)
//	srv, err := simdns.Start(ctx, simdns.Config{Directory: d, Certs: d, Logger: log,
//		EnableFastOpenSysctl: true})
type PopulationDirectory struct {
	pop   *population.Population
	certs CertProfiles
}

// NewPopulationDirectory adapts pop (and its certificates from certs) to simdns.
func NewPopulationDirectory(pop *population.Population, certs CertProfiles) *PopulationDirectory {
	return &PopulationDirectory{pop: pop, certs: certs}
}

// Behaviour implements Directory: a record's dns=udp,tcp, dot= and doh= keys say which
// protocols it offers, hostile= and rcode= its class. Addresses of third-party peers are
// left alone (the peer's own sockets, bound to the address, take precedence).
func (d *PopulationDirectory) Behaviour(addr netip.Addr, p Protocol) (Behaviour, bool) {
	r := d.pop.Lookup(addr)
	if r == nil || r.Peer != "" {
		return Behaviour{}, false
	}
	var offered bool
	switch p {
	case DoUDP:
		offered = r.HasDNS("udp")
	case DoTCP:
		offered = r.HasDNS("tcp")
	case DoT:
		offered = r.DoT != 0
	case DoH:
		offered = r.DoH != 0
	}
	if !offered {
		return Behaviour{}, false
	}
	return Behaviour{
		Class:  ClassOf(r),
		Answer: d.pop.Answer,
		TTL:    d.pop.AnswerTTL,
		// Most public resolvers issue session tickets; the population has no key for it
		// yet, nor for TLS 1.2-only, HTTP/1.1-only, edns-tcp-keepalive or TFO servers.
		SessionTickets: true,
		MaxQueries:     r.MaxQueries,
		Idle:           r.Idle,
		DDR:            DDRRecords(d.pop, addr),
	}, true
}

// DDRRecords are the SVCB records of addr's DDR designations (population.DDR).
func DDRRecords(pop *population.Population, addr netip.Addr) []dns.RR {
	var out []dns.RR
	for _, d := range pop.DDR(addr) {
		rr := &dns.SVCB{Hdr: dns.RR_Header{Name: DDRName, Rrtype: dns.TypeSVCB, Class: dns.ClassINET, Ttl: pop.AnswerTTL},
			Priority: d.Priority, Target: d.Target}
		rr.Value = append(rr.Value, &dns.SVCBAlpn{Alpn: d.ALPNs}, &dns.SVCBPort{Port: d.Port})
		var hints []net.IP
		for _, h := range d.IPv4Hints {
			hints = append(hints, h.AsSlice())
		}
		rr.Value = append(rr.Value, &dns.SVCBIPv4Hint{Hint: hints})
		if d.DoHPath != "" {
			rr.Value = append(rr.Value, &dns.SVCBDoHPath{Template: d.DoHPath})
		}
		out = append(out, rr)
	}
	return out
}

// FastOpen implements Directory (no population key for TFO yet: none).
func (d *PopulationDirectory) FastOpen(Protocol) []netip.Addr { return nil }

// ClassOf is the simdns class of a population record's DNS services.
func ClassOf(r *population.Record) Class {
	if c, ok := HostileClass(r.Hostile); ok {
		return c
	}
	switch r.RCode {
	case "REFUSED":
		return ClassRefused
	case "SERVFAIL":
		return ClassServfail
	}
	return ClassAnswer
}

// Certificate implements CertSource: the record's certificate profile (DefaultCertProfile
// if none); a record with sni= presents it only to a ClientHello carrying that name, like
// its QUIC side (docs/population.md).
func (d *PopulationDirectory) Certificate(addr netip.Addr, p Protocol, serverName string) (*tls.Certificate, error) {
	r := d.pop.Lookup(addr)
	if r == nil {
		return nil, fmt.Errorf("simdns: no population record for %s", addr)
	}
	if r.SNI != "" && !strings.EqualFold(serverName, r.SNI) {
		return nil, nil // unrecognized_name (RFC 6066 §3)
	}
	name := r.Cert
	if name == "" {
		name = DefaultCertProfile
	}
	if d.certs == nil {
		return nil, fmt.Errorf("simdns: %s on %s needs certificate %q and no certificates were given", p, addr, name)
	}
	return d.certs.Certificate(name)
}
