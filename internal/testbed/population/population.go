// Package population parses the testbed's population file (testbed/population.txt), which
// assigns every address of the simulated internet (198.19.0.0/16) its services, behaviour,
// path profile and geo data, and answers ground-truth questions about it: which (address,
// port) pairs speak QUIC, which are DNS servers, what a verifier must classify each as, how
// many round trips each handshake takes, the RTT of each path.
//
// The grammar is documented in docs/population.md. In short: a header of directives, then
// sections ([paths], [sites], [asns], [certs], [hosts]) of records, one per line, each a name
// (or an address / CIDR prefix for hosts) followed by key=value tokens. Tokens split on
// white space; a value may be double-quoted; '#' starts a comment. This is the only
// parser of the grammar: Python reads the JSON form of a parsed Population (its json
// names), which `simserver check --json` prints.
package population

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/quicver"
)

// FormatVersion is the version of the population file grammar this package reads.
const FormatVersion = 1

// Token modes of a QUIC server (RFC 9000 §8.1.3: NEW_TOKEN lets a client skip address
// validation, and with it the 3x anti-amplification limit, on its next connection).
const (
	TokenHonour = "honour" // NEW_TOKEN issued, and a presented token validates the address
	TokenIgnore = "ignore" // NEW_TOKEN issued, but presented tokens never validate (the 2021 behaviour)
	TokenNone   = "none"   // no NEW_TOKEN issued (only peers can do this: quic-go always issues one)
)

// Hostile is the part of hostile.Behaviours the population file accepts as hostile=
// (docs/population.md "Hostile kinds"). Each applies to every service of the host.
var Hostile = hostile.Subset{
	Implements: []hostile.Behaviour{hostile.Garbage, hostile.Truncated, hostile.BadVN, hostile.Endless,
		hostile.WrongLength, hostile.Reset, hostile.Stall, hostile.DraftOnly},
	Omits: map[hostile.Behaviour]string{
		hostile.WrongID:     "no population host has it: simdns acts it out for a Behaviour set directly, verify's in-process servers on DoQ",
		hostile.CloseApp:    "acted out by verify's in-process DoQ servers only",
		hostile.TLSStall:    "no population host has it: simdns acts it out for a Behaviour set directly",
		hostile.Flood:       "acted out by measuretest's in-process servers only (measure's deadline and memory tests)",
		hostile.Drip:        "HTTP only: acted out by measuretest's in-process servers only",
		hostile.HugeHeaders: "HTTP only: acted out by measuretest's in-process servers only",
	},
}

// ALPNNone as a host's whole alpn list (alpn=none): the QUIC server accepts only a
// ClientHello that offers no ALPN at all and refuses any offered protocol with TLS alert
// no_application_protocol (120), as rustls and quinn with no ALPN configured do; DNS on
// such a connection is framed as RFC 9250 (doq.NoALPNFraming). Verify: doq-no-alpn.
const ALPNNone = "none"

// NoALPN reports whether the record's QUIC server accepts only connections without ALPN
// (alpn=none).
func (r *Record) NoALPN() bool { return len(r.ALPNs) == 1 && r.ALPNs[0] == ALPNNone }

// Third-party peers (internal/testbed/peers starts them; simserver and simdns leave their addresses alone).
const (
	PeerCoreDNS  = "coredns"
	PeerHickory  = "hickory"
	PeerAioquic  = "aioquic"
	PeerNgtcp2   = "ngtcp2"
	PeerDNSProxy = "dnsproxy"
	PeerLazyDNS  = "lazydns"
)

// Retry modes (key retry).
const (
	RetryNo     = "no"     // never sends Retry
	RetryAlways = "always" // Retry to every client without a valid token
	// RetryFirst: Retry to an Initial without a valid token from an IP address the server
	// has not sent a Retry to within RetryFirstTTL, on the DoQ ports only (AdGuard
	// dnsproxy's address validator: an LRU of 1,000 addresses per DoQ listener, keyed by
	// IP without the port; its DoH3 listener has none). A valid NEW_TOKEN token skips it.
	RetryFirst = "first"
)

// RetryFirstTTL is how long a retry=first server remembers an address it sent a Retry to.
const RetryFirstTTL = 30 * time.Minute

// Path is a path profile: what the delay line applies between the vantage and a host.
type Path struct {
	Name   string        `json:"name"`
	RTT    time.Duration `json:"rtt_ns"`    // round trip; the delay line holds each direction RTT/2
	Jitter time.Duration `json:"jitter_ns"` // uniform +- per direction
	Loss   float64       `json:"loss"`      // probability a packet is dropped, per packet and direction (0..1)
}

// OneWay returns the one-way delay of the path.
func (p Path) OneWay() time.Duration { return p.RTT / 2 }

// Site is a location (geo data for the mmdb files).
type Site struct {
	Name      string  `json:"name"`
	Country   string  `json:"country"`   // ISO 3166-1 alpha-2
	Continent string  `json:"continent"` // two-letter continent code (EU, NA, AS, SA, OC, AF)
	City      string  `json:"city"`
	Lat       float64 `json:"lat"`
	Lon       float64 `json:"lon"`
}

// ASN is an autonomous system and its organisation.
type ASN struct {
	Number uint32 `json:"number"`
	Org    string `json:"org"`
}

// Cert is a certificate profile; internal/testbed/pki generates it deterministically.
type Cert struct {
	Name          string   `json:"name"`
	CN            string   `json:"cn"`            // subject common name of the leaf
	SANs          []string `json:"sans"`          // DNS names of the leaf (CN included)
	Issuer        string   `json:"issuer"`        // "self" or the name of a CA ("ca-a", "ca-b")
	Intermediates int      `json:"intermediates"` // intermediate certificates between leaf and CA (sent in the chain)
	Pad           int      `json:"pad"`           // filler bytes per certificate (a non-critical extension) to size the chain
}

// SelfSigned reports whether the leaf is its own issuer.
func (c Cert) SelfSigned() bool { return c.Issuer == "self" }

// Record is one [hosts] line: an address or prefix and everything that runs there.
type Record struct {
	Prefix    netip.Prefix `json:"prefix"`
	Line      int          `json:"line"`
	Class     string       `json:"class"`
	QUICPorts []uint16     `json:"quic"`     // UDP ports with a QUIC endpoint (or raw responder for hostile UDP kinds)
	ALPNs     []string     `json:"alpn"`     // ALPNs the QUIC server accepts, in its preference order
	Versions  []string     `json:"versions"` // QUIC versions advertised in VN ("v1", "v2", "draft-29", ...)
	Retry     bool         `json:"retry"`    // always sends Retry to a client without a valid token
	// RetryFirst: retry=first (see RetryFirst); Retry is false then.
	RetryFirst bool              `json:"retry_first"`
	Token      string            `json:"token"`   // TokenHonour, TokenIgnore, TokenNone
	Cert       string            `json:"cert"`    // certificate profile name
	SNI        string            `json:"sni"`     // if set, a handshake without this SNI fails (TLS alert)
	DNS        []string          `json:"dns"`     // plain DNS on port 53: "udp", "tcp"
	DoT        uint16            `json:"dot"`     // DoT TCP port (853), 0 if none
	DoH        uint16            `json:"doh"`     // DoH TCP port (443), 0 if none
	DoH3       uint16            `json:"doh3"`    // DoH over HTTP/3 UDP port (443, ALPN h3), 0 if none; same QUIC behaviour as the DoQ ports
	RCode      string            `json:"rcode"`   // DNS rcode answered: NOERROR, REFUSED, SERVFAIL
	Hostile    hostile.Behaviour `json:"hostile"` // one of Hostile.Implements, hostile.None if well-behaved
	Peer       string            `json:"peer"`    // a third-party server runs here (Peer* names)
	// Twin (IPv6 records only) is the IPv4 address of the same server: a dual-stack
	// resolver, one host with two addresses and one certificate. Zero for IPv6-only hosts.
	Twin netip.Addr `json:"twin"`
	Path string     `json:"path"`
	ASN  uint32     `json:"asn"`
	Site string     `json:"site"`

	// Connection policy (docs/population.md "Connection policy"): what the server allows
	// one connection. Zero values are the server's defaults (simserver: no query limit,
	// SimIdle, SimStreams, 0-RTT accepted); on a peer's line they state what that peer
	// does.
	MaxQueries int           `json:"maxq"`    // maxq=N: the server ends a connection after answering N queries
	Idle       time.Duration `json:"idle_ns"` // idle=DUR: its idle timeout (DoQ: max_idle_timeout; DoT: closes an idle connection)
	Streams    int           `json:"streams"` // streams=N: concurrent DoQ streams per connection (initial_max_streams_bidi)
	No0RTT     bool          `json:"no_0rtt"` // 0rtt=no: early data rejected (DoQ)
	// TokenAge (tokenage=DUR, simserver hosts with token=honour): the oldest NEW_TOKEN
	// token the server still honours (quic-go's Transport.MaxTokenAge); zero: quic-go's
	// default, QuicGoTokenAge. A token is presented at once after the connection that
	// got it (the hourly round's warm-up and measured exchanges), so this only shows to
	// a client that waits (conncheck's token ages).
	TokenAge time.Duration `json:"tokenage_ns"`
	// DDR are the designated resolvers this host's plain DNS names in answer to
	// _dns.resolver.arpa SVCB (RFC 9462), one SVCB record each (ddr=ALPN[+ALPN]@PORT[/HINT],...).
	DDR []Designation `json:"ddr"`
}

// Designation is one DDR designated endpoint of a population record: an SVCB record with
// these ALPNs and port whose ipv4hint is Hint (the record's own address when zero).
type Designation struct {
	ALPNs []string   `json:"alpns"`
	Port  uint16     `json:"port"`
	Hint  netip.Addr `json:"hint"`
}

// Size is the number of addresses the record covers.
func (r *Record) Size() int { return 1 << (r.Prefix.Addr().BitLen() - r.Prefix.Bits()) }

// HasQUICPort reports whether the record has a QUIC endpoint on port (a DoQ/QUIC port
// or its DoH3 port).
func (r *Record) HasQUICPort(port uint16) bool {
	return slices.Contains(r.QUICPorts, port) || (r.DoH3 != 0 && r.DoH3 == port)
}

// ALPNsOn returns the ALPNs the QUIC endpoint on port accepts: h3 on the DoH3 port (unless
// it is also listed in quic=), the record's alpn list elsewhere.
func (r *Record) ALPNsOn(port uint16) []string {
	if r.DoH3 != 0 && port == r.DoH3 && !slices.Contains(r.QUICPorts, port) {
		return []string{"h3"}
	}
	return r.ALPNs
}

// AllQUICPorts returns the QUIC ports of the record, the DoH3 port included, ascending.
func (r *Record) AllQUICPorts() []uint16 {
	out := slices.Clone(r.QUICPorts)
	if r.DoH3 != 0 && !slices.Contains(out, r.DoH3) {
		out = append(out, r.DoH3)
	}
	slices.Sort(out)
	return out
}

// HasDNS reports whether plain DNS runs on port 53 over transport ("udp" or "tcp").
func (r *Record) HasDNS(transport string) bool { return slices.Contains(r.DNS, transport) }

// RawQUIC reports whether the record's QUIC ports are a raw responder that never
// completes a handshake (hostile garbage, bad-vn, draft-only) rather than a QUIC server.
func (r *Record) RawQUIC() bool {
	switch r.Hostile {
	case hostile.Garbage, hostile.BadVN, hostile.DraftOnly:
		return true
	}
	return false
}

// Population is a parsed population file.
type Population struct {
	Format      int             `json:"format"`
	Seed        uint64          `json:"seed"`
	Prefix      netip.Prefix    `json:"prefix"`
	Prefix6     netip.Prefix    `json:"prefix6"` // the IPv6 half of the simulated internet (prefix6 directive; optional)
	Answer      netip.Addr      `json:"answer"`  // the A record every NOERROR resolver returns for any name
	AnswerTTL   uint32          `json:"answer_ttl"`
	DefaultPath string          `json:"default_path"` // path of unlisted (silent) addresses
	Paths       map[string]Path `json:"paths"`
	Sites       map[string]Site `json:"sites"`
	ASNs        map[uint32]ASN  `json:"asns"`
	Certs       map[string]Cert `json:"certs"`
	Records     []Record        `json:"records"` // IPv4 hosts, sorted by address, non-overlapping
	// Records6 are the IPv6 hosts (inside Prefix6), kept apart so that everything reading
	// Records keeps meaning the IPv4 internet; IPv6 answers the same questions on them.
	Records6 []Record `json:"records6"`
}

// IPv6 returns the IPv6 half of the population as a population of its own: Records are
// the IPv6 hosts and Prefix is Prefix6, so every ground-truth question (QUICSpeakers,
// DNSServers, ExpectVerify, HandshakeRTTs, ...) has its IPv6 answer. It shares p's
// tables (paths, sites, ASNs, certificates).
func (p *Population) IPv6() *Population {
	v := *p
	v.Prefix, v.Records, v.Records6 = p.Prefix6, p.Records6, nil
	return &v
}

// AllRecords returns the IPv4 records, then the IPv6 ones.
func (p *Population) AllRecords() []*Record {
	out := make([]*Record, 0, len(p.Records)+len(p.Records6))
	for i := range p.Records {
		out = append(out, &p.Records[i])
	}
	for i := range p.Records6 {
		out = append(out, &p.Records6[i])
	}
	return out
}

// Load reads and parses a population file (opened with listfile.Open: a FIFO or a
// directory is an error, never a wait).
func Load(path string) (*Population, error) {
	f, err := listfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("population: %w", err)
	}
	defer f.Close()
	p, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("population %s: %w", path, err)
	}
	return p, nil
}

// SplitLine splits a line into tokens: white-space separated, double quotes group, '#'
// outside quotes starts a comment. Same as Python's shlex.split(line, comments=True) for
// the subset the file uses.
func SplitLine(line string) ([]string, error) {
	var toks []string
	var cur strings.Builder
	inTok, inQuote := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case inQuote:
			if c == '"' {
				inQuote = false
			} else {
				cur.WriteByte(c)
			}
		case c == '"':
			inQuote, inTok = true, true
		case c == '#':
			i = len(line)
		case c == ' ' || c == '\t' || c == '\r':
			if inTok {
				toks = append(toks, cur.String())
				cur.Reset()
				inTok = false
			}
		default:
			cur.WriteByte(c)
			inTok = true
		}
	}
	if inQuote {
		return nil, errors.New("unterminated quote")
	}
	if inTok {
		toks = append(toks, cur.String())
	}
	return toks, nil
}

// kv splits key=value tokens into a map, rejecting duplicates and unknown keys.
func kv(toks []string, allowed ...string) (map[string]string, error) {
	m := make(map[string]string, len(toks))
	for _, t := range toks {
		k, v, ok := strings.Cut(t, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("token %q is not key=value", t)
		}
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("unknown key %q", k)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("key %q given twice", k)
		}
		m[k] = v
	}
	return m, nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %s", s)
	}
	return d, nil
}

func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return 0, err
	}
	if v < 0 || v > 100 || !strings.HasSuffix(s, "%") {
		return 0, fmt.Errorf("loss %q: want a percentage 0%%..100%%", s)
	}
	return v / 100, nil
}

func parsePorts(s string) ([]uint16, error) {
	var out []uint16
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(f, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("bad port %q", f)
		}
		if slices.Contains(out, uint16(n)) {
			return nil, fmt.Errorf("port %d listed twice", n)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return uint16(n), nil
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Parse reads a population file.
func Parse(r io.Reader) (*Population, error) {
	p := &Population{
		Paths: map[string]Path{}, Sites: map[string]Site{}, ASNs: map[uint32]ASN{}, Certs: map[string]Cert{},
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	section := ""
	n := 0
	for sc.Scan() {
		n++
		toks, err := SplitLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if len(toks) == 0 {
			continue
		}
		if strings.HasPrefix(toks[0], "[") {
			if len(toks) != 1 || !strings.HasSuffix(toks[0], "]") {
				return nil, fmt.Errorf("line %d: bad section header", n)
			}
			section = strings.Trim(toks[0], "[]")
			switch section {
			case "paths", "sites", "asns", "certs", "hosts":
			default:
				return nil, fmt.Errorf("line %d: unknown section %q", n, section)
			}
			if section != "paths" && p.Format == 0 {
				return nil, fmt.Errorf("line %d: format directive missing before sections", n)
			}
			continue
		}
		if err := p.parseLine(section, toks, n); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Population) parseLine(section string, toks []string, n int) error {
	switch section {
	case "":
		return p.parseDirective(toks)
	case "paths":
		m, err := kv(toks[1:], "rtt", "jitter", "loss")
		if err != nil {
			return err
		}
		path := Path{Name: toks[0]}
		if path.RTT, err = parseDuration(m["rtt"]); err != nil {
			return fmt.Errorf("path %s: rtt: %w", toks[0], err)
		}
		if v, ok := m["jitter"]; ok {
			if path.Jitter, err = parseDuration(v); err != nil {
				return fmt.Errorf("path %s: jitter: %w", toks[0], err)
			}
		}
		if v, ok := m["loss"]; ok {
			if path.Loss, err = parsePercent(v); err != nil {
				return fmt.Errorf("path %s: %w", toks[0], err)
			}
		}
		if _, dup := p.Paths[path.Name]; dup {
			return fmt.Errorf("path %s defined twice", path.Name)
		}
		p.Paths[path.Name] = path
	case "sites":
		m, err := kv(toks[1:], "cc", "continent", "city", "lat", "lon")
		if err != nil {
			return err
		}
		s := Site{Name: toks[0], Country: m["cc"], Continent: m["continent"], City: m["city"]}
		if len(s.Country) != 2 || len(s.Continent) != 2 {
			return fmt.Errorf("site %s: cc and continent must be two letters", s.Name)
		}
		if s.Lat, err = strconv.ParseFloat(m["lat"], 64); err != nil || s.Lat < -90 || s.Lat > 90 {
			return fmt.Errorf("site %s: bad lat %q", s.Name, m["lat"])
		}
		if s.Lon, err = strconv.ParseFloat(m["lon"], 64); err != nil || s.Lon < -180 || s.Lon > 180 {
			return fmt.Errorf("site %s: bad lon %q", s.Name, m["lon"])
		}
		if _, dup := p.Sites[s.Name]; dup {
			return fmt.Errorf("site %s defined twice", s.Name)
		}
		p.Sites[s.Name] = s
	case "asns":
		num, err := parseASN(toks[0])
		if err != nil {
			return err
		}
		m, err := kv(toks[1:], "org")
		if err != nil {
			return err
		}
		if m["org"] == "" {
			return fmt.Errorf("AS%d: org missing", num)
		}
		if _, dup := p.ASNs[num]; dup {
			return fmt.Errorf("AS%d defined twice", num)
		}
		p.ASNs[num] = ASN{Number: num, Org: m["org"]}
	case "certs":
		m, err := kv(toks[1:], "cn", "san", "issuer", "intermediates", "pad")
		if err != nil {
			return err
		}
		c := Cert{Name: toks[0], CN: m["cn"], SANs: list(m["san"]), Issuer: m["issuer"]}
		if c.CN == "" || c.Issuer == "" {
			return fmt.Errorf("cert %s: cn and issuer required", c.Name)
		}
		if !slices.Contains(c.SANs, c.CN) {
			c.SANs = append([]string{c.CN}, c.SANs...)
		}
		if v, ok := m["intermediates"]; ok {
			if c.Intermediates, err = strconv.Atoi(v); err != nil || c.Intermediates < 0 || c.Intermediates > 16 {
				return fmt.Errorf("cert %s: bad intermediates %q", c.Name, v)
			}
		}
		if v, ok := m["pad"]; ok {
			if c.Pad, err = strconv.Atoi(v); err != nil || c.Pad < 0 || c.Pad > 16000 {
				return fmt.Errorf("cert %s: bad pad %q", c.Name, v)
			}
		}
		if c.SelfSigned() && c.Intermediates != 0 {
			return fmt.Errorf("cert %s: a self-signed certificate has no intermediates", c.Name)
		}
		if _, dup := p.Certs[c.Name]; dup {
			return fmt.Errorf("cert %s defined twice", c.Name)
		}
		p.Certs[c.Name] = c
	case "hosts":
		rec, err := parseHost(toks, n)
		if err != nil {
			return err
		}
		if rec.Prefix.Addr().Is6() {
			p.Records6 = append(p.Records6, rec)
		} else {
			p.Records = append(p.Records, rec)
		}
	}
	return nil
}

func parseASN(s string) (uint32, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "AS"), 10, 32)
	if err != nil || !strings.HasPrefix(s, "AS") || v == 0 {
		return 0, fmt.Errorf("bad AS number %q (want AS<n>)", s)
	}
	return uint32(v), nil
}

func (p *Population) parseDirective(toks []string) error {
	if len(toks) < 2 {
		return fmt.Errorf("directive %q needs a value", toks[0])
	}
	switch toks[0] {
	case "format":
		v, err := strconv.Atoi(toks[1])
		if err != nil {
			return fmt.Errorf("format: %w", err)
		}
		if v != FormatVersion {
			return fmt.Errorf("format %d not supported (this build reads %d)", v, FormatVersion)
		}
		p.Format = v
	case "seed":
		v, err := strconv.ParseUint(toks[1], 10, 64)
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		p.Seed = v
	case "prefix":
		pf, err := netip.ParsePrefix(toks[1])
		if err != nil || !pf.Addr().Is4() || pf != pf.Masked() {
			return fmt.Errorf("prefix %q: want a masked IPv4 prefix", toks[1])
		}
		p.Prefix = pf
	case "prefix6":
		pf, err := netip.ParsePrefix(toks[1])
		if err != nil || !pf.Addr().Is6() || pf.Addr().Is4In6() || pf != pf.Masked() {
			return fmt.Errorf("prefix6 %q: want a masked IPv6 prefix", toks[1])
		}
		p.Prefix6 = pf
	case "answer":
		a, err := netip.ParseAddr(toks[1])
		if err != nil || !a.Is4() {
			return fmt.Errorf("answer %q: want an IPv4 address", toks[1])
		}
		p.Answer = a
		p.AnswerTTL = 300
		if len(toks) > 2 {
			m, err := kv(toks[2:], "ttl")
			if err != nil {
				return err
			}
			ttl, err := strconv.ParseUint(m["ttl"], 10, 32)
			if err != nil {
				return fmt.Errorf("answer ttl: %w", err)
			}
			p.AnswerTTL = uint32(ttl)
		}
	case "default-path":
		p.DefaultPath = toks[1]
	default:
		return fmt.Errorf("unknown directive %q", toks[0])
	}
	return nil
}

var hostKeys = []string{"class", "quic", "alpn", "versions", "retry", "token", "cert", "sni", "dns", "dot", "doh", "doh3",
	"rcode", "hostile", "peer", "path", "asn", "site", "twin", "maxq", "idle", "streams", "0rtt", "tokenage", "ddr"}

// MinPrefix6Bits bounds an IPv6 host prefix: every address of a record is a host, so a
// record covers at most 2^(128-MinPrefix6Bits) addresses.
const MinPrefix6Bits = 120

func parseHost(toks []string, line int) (Record, error) {
	var r Record
	r.Line = line
	if strings.Contains(toks[0], "/") {
		pf, err := netip.ParsePrefix(toks[0])
		if err != nil || pf != pf.Masked() || pf.Addr().Is4In6() || (pf.Addr().Is6() && pf.Bits() < MinPrefix6Bits) {
			return r, fmt.Errorf("host %q: want an IPv4 or IPv6 address or masked prefix (IPv6: /%d or longer)", toks[0], MinPrefix6Bits)
		}
		r.Prefix = pf
	} else {
		a, err := netip.ParseAddr(toks[0])
		if err != nil || a.Is4In6() || a.Zone() != "" {
			return r, fmt.Errorf("host %q: want an IPv4 or IPv6 address or masked prefix", toks[0])
		}
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
	}
	m, err := kv(toks[1:], hostKeys...)
	if err != nil {
		return r, fmt.Errorf("host %s: %w", toks[0], err)
	}
	r.Class = m["class"]
	if r.Class == "" {
		return r, fmt.Errorf("host %s: class missing", toks[0])
	}
	if v, ok := m["quic"]; ok {
		if r.QUICPorts, err = parsePorts(v); err != nil {
			return r, fmt.Errorf("host %s: quic: %w", toks[0], err)
		}
	}
	r.ALPNs = list(m["alpn"])
	if slices.Contains(r.ALPNs, ALPNNone) && (len(r.ALPNs) > 1 || r.SNI != "" || m["sni"] != "" || m["doh3"] != "") {
		return r, fmt.Errorf("host %s: alpn=%s stands alone (no other ALPN, no sni, no doh3)", toks[0], ALPNNone)
	}
	r.Versions = list(m["versions"])
	for _, v := range r.Versions {
		if _, ok := quicver.Lookup(v); !ok {
			return r, fmt.Errorf("host %s: unknown QUIC version %q", toks[0], v)
		}
	}
	switch m["retry"] {
	case "", RetryNo:
	case RetryAlways:
		r.Retry = true
	case RetryFirst:
		r.RetryFirst = true
	default:
		return r, fmt.Errorf("host %s: retry=%q (want always, first or no)", toks[0], m["retry"])
	}
	r.Token = m["token"]
	switch r.Token {
	case "", TokenHonour, TokenIgnore, TokenNone:
	default:
		return r, fmt.Errorf("host %s: token=%q", toks[0], r.Token)
	}
	r.Cert, r.SNI = m["cert"], m["sni"]
	r.DNS = list(m["dns"])
	for _, t := range r.DNS {
		if t != "udp" && t != "tcp" {
			return r, fmt.Errorf("host %s: dns=%q (want udp,tcp)", toks[0], m["dns"])
		}
	}
	if v, ok := m["dot"]; ok {
		if r.DoT, err = parsePort(v); err != nil {
			return r, fmt.Errorf("host %s: dot: %w", toks[0], err)
		}
	}
	if v, ok := m["doh"]; ok {
		if r.DoH, err = parsePort(v); err != nil {
			return r, fmt.Errorf("host %s: doh: %w", toks[0], err)
		}
	}
	if v, ok := m["doh3"]; ok {
		if r.DoH3, err = parsePort(v); err != nil {
			return r, fmt.Errorf("host %s: doh3: %w", toks[0], err)
		}
		if len(r.QUICPorts) == 0 {
			return r, fmt.Errorf("host %s: doh3 needs a QUIC server (quic=...)", toks[0])
		}
	}
	r.RCode = m["rcode"]
	switch r.RCode {
	case "":
		r.RCode = "NOERROR"
	case "NOERROR", "REFUSED", "SERVFAIL":
	default:
		return r, fmt.Errorf("host %s: rcode=%q", toks[0], r.RCode)
	}
	r.Hostile = hostile.Behaviour(m["hostile"])
	if r.Hostile != hostile.None && !slices.Contains(Hostile.Implements, r.Hostile) {
		return r, fmt.Errorf("host %s: hostile=%q", toks[0], r.Hostile)
	}
	r.Peer = m["peer"]
	switch r.Peer {
	case "", PeerCoreDNS, PeerHickory, PeerAioquic, PeerNgtcp2, PeerDNSProxy, PeerLazyDNS:
	default:
		return r, fmt.Errorf("host %s: peer=%q", toks[0], r.Peer)
	}
	if r.RetryFirst && r.Peer != PeerDNSProxy {
		// simserver has no per-address memory; only the stack that behaves so serves it.
		return r, fmt.Errorf("host %s: retry=first needs peer=dnsproxy", toks[0])
	}
	r.Path, r.Site = m["path"], m["site"]
	if v, ok := m["twin"]; ok {
		a, err := netip.ParseAddr(v)
		if err != nil || !a.Is4() || !r.Prefix.Addr().Is6() || !r.Prefix.IsSingleIP() {
			return r, fmt.Errorf("host %s: twin %q: an IPv6 address's IPv4 twin address", toks[0], v)
		}
		r.Twin = a
	}
	if v, ok := m["asn"]; ok {
		if r.ASN, err = parseASN(v); err != nil {
			return r, fmt.Errorf("host %s: %w", toks[0], err)
		}
	}
	if err := parsePolicy(&r, m); err != nil {
		return r, fmt.Errorf("host %s: %w", toks[0], err)
	}
	if len(r.QUICPorts) > 0 && r.Peer == "" {
		if !r.RawQUIC() && (len(r.ALPNs) == 0 || len(r.Versions) == 0 || r.Cert == "" || r.Token == "") {
			return r, fmt.Errorf("host %s: a QUIC server needs alpn, versions, cert and token", toks[0])
		}
	}
	return r, nil
}

func (p *Population) validate() error {
	if p.Format == 0 {
		return errors.New("format directive missing")
	}
	if !p.Prefix.IsValid() {
		return errors.New("prefix directive missing")
	}
	if !p.Answer.IsValid() {
		return errors.New("answer directive missing")
	}
	if _, ok := p.Paths[p.DefaultPath]; !ok {
		return fmt.Errorf("default-path %q is not a defined path", p.DefaultPath)
	}
	if len(p.Records6) > 0 && !p.Prefix6.IsValid() {
		return fmt.Errorf("line %d: an IPv6 host without a prefix6 directive", p.Records6[0].Line)
	}
	if err := p.validateRecords(p.Records, p.Prefix); err != nil {
		return err
	}
	if err := p.validateRecords(p.Records6, p.Prefix6); err != nil {
		return err
	}
	for i := range p.Records6 {
		r := &p.Records6[i]
		if !r.Twin.IsValid() {
			continue
		}
		t := p.Lookup(r.Twin)
		switch {
		case t == nil:
			return fmt.Errorf("line %d: twin %s is not a listed host", r.Line, r.Twin)
		case t.Cert != r.Cert:
			return fmt.Errorf("line %d: twin %s has certificate %q, not %q: one server has one certificate", r.Line, r.Twin, t.Cert, r.Cert)
		}
	}
	return nil
}

// validateRecords sorts the records of one family and checks them against its prefix
// and the tables.
func (p *Population) validateRecords(recs []Record, prefix netip.Prefix) error {
	sort.SliceStable(recs, func(i, j int) bool {
		return recs[i].Prefix.Addr().Less(recs[j].Prefix.Addr())
	})
	for i := range recs {
		r := &recs[i]
		if !prefix.Contains(r.Prefix.Addr()) || r.Prefix.Bits() < prefix.Bits() {
			return fmt.Errorf("line %d: %s is outside %s", r.Line, r.Prefix, prefix)
		}
		if i > 0 {
			prev := &recs[i-1]
			if prev.Prefix.Overlaps(r.Prefix) {
				return fmt.Errorf("line %d: %s overlaps %s (line %d)", r.Line, r.Prefix, prev.Prefix, prev.Line)
			}
		}
		if _, ok := p.Paths[r.Path]; !ok {
			return fmt.Errorf("line %d: path %q not defined", r.Line, r.Path)
		}
		if _, ok := p.Sites[r.Site]; !ok {
			return fmt.Errorf("line %d: site %q not defined", r.Line, r.Site)
		}
		if _, ok := p.ASNs[r.ASN]; !ok {
			return fmt.Errorf("line %d: AS%d not defined", r.Line, r.ASN)
		}
		if r.Cert != "" {
			if _, ok := p.Certs[r.Cert]; !ok {
				return fmt.Errorf("line %d: cert %q not defined", r.Line, r.Cert)
			}
		}
	}
	return nil
}

// Lookup returns the record covering addr (of either family), or nil for a silent
// (unlisted) address.
func (p *Population) Lookup(addr netip.Addr) *Record {
	addr = addr.Unmap()
	if r := lookupIn(p.Records, addr); r != nil {
		return r
	}
	return lookupIn(p.Records6, addr)
}

// lookupIn finds addr in records sorted by address.
func lookupIn(recs []Record, addr netip.Addr) *Record {
	i := sort.Search(len(recs), func(i int) bool {
		return addr.Less(recs[i].Prefix.Addr())
	})
	if i == 0 {
		return nil
	}
	r := &recs[i-1]
	if r.Prefix.Contains(addr) {
		return r
	}
	return nil
}

// PathOf returns the path profile of addr (the default path for unlisted addresses).
func (p *Population) PathOf(addr netip.Addr) Path {
	if r := p.Lookup(addr); r != nil {
		return p.Paths[r.Path]
	}
	return p.Paths[p.DefaultPath]
}

// Addrs yields every address of the record.
func (r *Record) Addrs(yield func(netip.Addr) bool) {
	a := r.Prefix.Addr()
	for i := 0; i < r.Size(); i++ {
		if !yield(a) {
			return
		}
		a = a.Next()
	}
}

// Hosts yields every listed address with its record, in address order.
func (p *Population) Hosts(yield func(netip.Addr, *Record) bool) {
	for i := range p.Records {
		r := &p.Records[i]
		for a := range r.Addrs {
			if !yield(a, r) {
				return
			}
		}
	}
}

// ByClass returns the records of a class, in address order.
func (p *Population) ByClass(class string) []*Record {
	var out []*Record
	for i := range p.Records {
		if p.Records[i].Class == class {
			out = append(out, &p.Records[i])
		}
	}
	return out
}

// Classes returns every class name, sorted.
func (p *Population) Classes() []string {
	var out []string
	for i := range p.Records {
		if !slices.Contains(out, p.Records[i].Class) {
			out = append(out, p.Records[i].Class)
		}
	}
	slices.Sort(out)
	return out
}

// DefaultFile is the population file's path relative to the repository root.
const DefaultFile = "testbed/population.txt"

// DefaultPath is DefaultFile in the project home (see internal/home).
func DefaultPath() string { return home.Path(DefaultFile) }

// LoadDefault loads the committed population: $DOQSCAN_POPULATION if set, else
// DefaultPath (the project home is found from the working directory too, so tests in any
// package find it).
func LoadDefault() (*Population, error) {
	if p := os.Getenv("DOQSCAN_POPULATION"); p != "" {
		return Load(p)
	}
	return Load(DefaultPath())
}
