package verify

import (
	"cmp"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/doqscan/doqscan/internal/certs"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/geo"
	"github.com/doqscan/doqscan/internal/quicver"
)

// Record is one target's result as verify prints it with --json: one JSON object per
// line (zgrab2's shape). What was not observed is absent or null, never a zero that
// could be read as a fact (a null alpn: no handshake; "": none negotiated, doq-no-alpn).
type Record struct {
	IP           string       `json:"ip"`
	Port         uint16       `json:"port"`
	Outcome      Outcome      `json:"outcome"`
	Detail       string       `json:"detail,omitempty"`
	ALPN         *string      `json:"alpn"`
	QUICVersion  string       `json:"quic_version,omitempty"`
	TLSVersion   string       `json:"tls_version,omitempty"`
	TLSCipher    string       `json:"tls_cipher,omitempty"`
	HandshakeMS  *float64     `json:"handshake_ms"`
	SNI          string       `json:"sni,omitempty"`
	SNISource    string       `json:"sni_source"`
	Rcode        string       `json:"dns_rcode,omitempty"`
	Answers      *int         `json:"dns_answers,omitempty"`
	Attempts     int          `json:"attempts"`
	ScanVersions []string     `json:"scan_versions,omitempty"`
	Certificate  *CertSummary `json:"certificate,omitempty"`
	Location     *Location    `json:"location,omitempty"`
	VerifiedAt   time.Time    `json:"verified_at"`
}

// CertSummary is the leaf certificate the target showed, and its chain.
type CertSummary struct {
	Subject     string    `json:"subject"`
	Issuer      string    `json:"issuer"`
	SANs        []string  `json:"sans"`
	NotBefore   time.Time `json:"not_before"`
	NotAfter    time.Time `json:"not_after"`
	KeyType     string    `json:"key_type"`
	KeyBits     *int32    `json:"key_bits,omitempty"`
	SelfSigned  bool      `json:"self_signed"`
	SHA256      string    `json:"sha256"`
	ChainLength int       `json:"chain_length"`
	// ValidForSNI: the chain validates against the roots and names the SNI (or the
	// address); null when it was not checked.
	ValidForSNI *bool `json:"valid_for_sni"`
}

// Location is the target's AS and location from the GeoIP databases (--geoip-*).
type Location struct {
	ASN       *int64   `json:"asn,omitempty"`
	ASOrg     *string  `json:"as_org,omitempty"`
	Country   *string  `json:"country,omitempty"`
	Continent *string  `json:"continent,omitempty"`
	City      *string  `json:"city,omitempty"`
	Latitude  *float64 `json:"latitude,omitempty"`
	Longitude *float64 `json:"longitude,omitempty"`
}

// RecordOf is r as printed; gdb (nil: none) adds the location.
func RecordOf(r Result, gdb *geo.DB) Record {
	rec := Record{IP: r.Addr.Addr().String(), Port: r.Addr.Port(), Outcome: r.Outcome, Detail: r.Detail,
		SNI: r.SNI, SNISource: r.SNISource, Attempts: r.Attempts, VerifiedAt: r.At.UTC()}
	if r.QUICVersion != 0 {
		alpn := r.ALPN
		hs := float64(r.Handshake.Microseconds()) / 1000
		rec.ALPN, rec.HandshakeMS = &alpn, &hs
		rec.QUICVersion = quicver.Name(r.QUICVersion)
		rec.TLSVersion, rec.TLSCipher = tls.VersionName(r.TLSVersion), r.TLSCipher
	}
	if r.Rcode != nil {
		rec.Rcode = dnsmsg.RcodeName(*r.Rcode)
		n := r.Answers
		rec.Answers = &n
	}
	for _, v := range r.ScanVersions {
		rec.ScanVersions = append(rec.ScanVersions, quicver.Name(uint32(v)))
	}
	if len(r.Chain) > 0 {
		leaf := certs.Row(r.Chain[0], r.At)
		rec.Certificate = &CertSummary{Subject: leaf.Subject, Issuer: leaf.Issuer, SANs: leaf.SANs,
			KeyType: leaf.KeyType, KeyBits: leaf.KeyBits, SelfSigned: leaf.SelfSigned,
			SHA256: hex.EncodeToString(leaf.SHA256), ChainLength: len(r.Chain), ValidForSNI: r.CertValid}
		if leaf.NotBefore != nil && leaf.NotAfter != nil {
			rec.Certificate.NotBefore, rec.Certificate.NotAfter = *leaf.NotBefore, *leaf.NotAfter
		}
	}
	if gdb != nil {
		if loc, err := gdb.Lookup(r.Addr.Addr()); err == nil {
			rec.Location = &Location{ASN: loc.ASN, ASOrg: loc.ASOrg, Country: loc.Country, Continent: loc.Continent,
				City: loc.City, Latitude: loc.Latitude, Longitude: loc.Longitude}
		}
	}
	return rec
}

// Printer prints each result as it is made: a JSON line, or a table row (written at
// Close). Its methods are called from one goroutine.
type Printer struct {
	json  *cli.JSONLines
	table *cli.Table
}

// NewPrinter prints JSON lines (asJSON) or a table on w.
func NewPrinter(w io.Writer, asJSON bool) *Printer {
	if asJSON {
		return &Printer{json: cli.NewJSONLines(w)}
	}
	return &Printer{table: cli.NewTable(w, "TARGET", "OUTCOME", "ALPN", "QUIC", "HANDSHAKE", "RCODE", "SNI", "CERTIFICATE", "DETAIL")}
}

// Print prints one result.
func (p *Printer) Print(rec Record) error {
	if p.json != nil {
		return p.json.Write(rec)
	}
	hs, alpn, cert := "-", "-", "-"
	if rec.HandshakeMS != nil {
		hs = fmt.Sprintf("%.1f ms", *rec.HandshakeMS)
		alpn = cmp.Or(*rec.ALPN, "(none)")
	}
	if c := rec.Certificate; c != nil {
		cert = cli.Cut(c.Subject, 40)
		if c.ValidForSNI != nil && !*c.ValidForSNI {
			cert += " (not valid)"
		}
	}
	p.table.Row(netip.AddrPortFrom(netip.MustParseAddr(rec.IP), rec.Port).String(), string(rec.Outcome), alpn, cmp.Or(rec.QUICVersion, "-"), hs, cmp.Or(rec.Rcode, "-"),
		cmp.Or(rec.SNI, "-"), cert, cli.Cut(rec.Detail, 60))
	return nil
}

// Close writes the table (a JSON printer has written every line already).
func (p *Printer) Close() error {
	if p.table != nil {
		return p.table.Flush()
	}
	return nil
}
