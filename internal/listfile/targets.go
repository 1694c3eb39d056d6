package listfile

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/protocol"
)

// The targets file of verify and measure: one resolver per line,
//
//	ADDRESS[:PORT] [sni=NAME] [PROTOCOL=PORT[/ALPN] ...]
//
// ADDRESS is an IPv4 or IPv6 address ("198.19.0.7", "2001:2::7", "[2001:2::7]"); with a
// port ("198.19.0.7:784", "[2001:2::7]:784") the port is a DoQ port, as doq=PORT: a
// targets file lists the DoQ endpoints a scan finds. PROTOCOL=PORT[/ALPN] names one
// endpoint (the protocols are internal/protocol's; the ALPN is DoQ's, default doq);
// sni=NAME is the server name. What a line does not name, each
// tool fills in (Targets.Expand): verify verifies the line's DoQ endpoints, or DoQ on
// 853 when it names none; measure measures every protocol, on its default port where
// the line names none. A resolver on several lines is one target with the endpoints of
// all of them (MergeTargets).

// PortProtocol is the protocol of the port written after a target's address: the one
// the scan discovers.
const PortProtocol = protocol.DoQ

// Target is one resolver of a targets file: its address, server name and endpoints.
type Target struct {
	Addr       netip.Addr // unmapped, without zone
	ServerName string     // sni=NAME; "" when none
	Endpoints  []Endpoint // in line order, each (protocol, port) once
}

// Endpoint is one (protocol, port) of a target, with the DoQ ALPN to offer.
type Endpoint struct {
	Protocol string
	Port     uint16
	ALPN     string // DoQ only
}

// ParseTarget parses the text of one targets line (see the grammar above); the
// endpoints are the ones the line names, unchecked beyond their syntax.
func ParseTarget(text string) (Target, error) {
	f := strings.Fields(text)
	if len(f) == 0 {
		return Target{}, fmt.Errorf("empty target")
	}
	addr, port, err := parseAddress(f[0])
	if err != nil {
		return Target{}, err
	}
	t := Target{Addr: addr}
	if port != 0 {
		t.Endpoints = append(t.Endpoints, Endpoint{Protocol: PortProtocol, Port: port})
	}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return Target{}, fmt.Errorf("%q is not PROTOCOL=PORT[/ALPN] or sni=NAME", kv)
		}
		if k == "sni" {
			if _, ok := dns.IsDomainName(v); !ok || v == "" || net.ParseIP(v) != nil {
				return Target{}, fmt.Errorf("sni=%q is not a host name", v)
			}
			if t.ServerName != "" && t.ServerName != v {
				return Target{}, fmt.Errorf("two server names (sni=%s, sni=%s)", t.ServerName, v)
			}
			t.ServerName = v
			continue
		}
		portS, alpn, _ := strings.Cut(v, "/")
		p, err := strconv.ParseUint(portS, 10, 16)
		if err != nil || p == 0 {
			return Target{}, fmt.Errorf("%s: port %q: want 1..65535", k, portS)
		}
		if t.Endpoints, err = AddEndpoint(t.Endpoints, Endpoint{Protocol: k, Port: uint16(p), ALPN: alpn}); err != nil {
			return Target{}, err
		}
	}
	return t, nil
}

// parseAddress reads "addr", "[v6]", "addr:port" or "[v6]:port" (port 0: none).
func parseAddress(s string) (netip.Addr, uint16, error) {
	var port uint16
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			return netip.Addr{}, 0, fmt.Errorf("%q: want ADDRESS, ADDRESS:PORT or [IPv6]:PORT", s)
		}
		if ap.Port() == 0 {
			return netip.Addr{}, 0, fmt.Errorf("%q: port 0", s)
		}
		a, port = ap.Addr(), ap.Port()
	}
	if a.Zone() != "" {
		return netip.Addr{}, 0, fmt.Errorf("%q: zoned addresses are not targets", s)
	}
	return a.Unmap(), port, nil
}

// AddEndpoint appends ep unless its (protocol, port) is there already; the same
// (protocol, port) with another ALPN is an error (the rows could not tell them apart).
func AddEndpoint(eps []Endpoint, ep Endpoint) ([]Endpoint, error) {
	for _, e := range eps {
		if e.Protocol == ep.Protocol && e.Port == ep.Port {
			if e.ALPN != ep.ALPN {
				return eps, fmt.Errorf("%s=%d with ALPN %q and %q (one ALPN per port)", ep.Protocol, ep.Port, e.ALPN, ep.ALPN)
			}
			return eps, nil
		}
	}
	return append(eps, ep), nil
}

// MergeTarget adds next's endpoints (and server name) to kept, the target of the same
// address read earlier; two different server names are an error.
func MergeTarget(kept *Target, next Target) error {
	if next.ServerName != "" && kept.ServerName != "" && next.ServerName != kept.ServerName {
		return fmt.Errorf("%s: sni=%s, but an earlier entry has sni=%s (one server name per resolver)", next.Addr, next.ServerName, kept.ServerName)
	}
	if kept.ServerName == "" {
		kept.ServerName = next.ServerName
	}
	eps := kept.Endpoints
	for _, ep := range next.Endpoints {
		var err error
		if eps, err = AddEndpoint(eps, ep); err != nil {
			return fmt.Errorf("%s: %w", next.Addr, err)
		}
	}
	kept.Endpoints = eps
	return nil
}

// Targets reads targets files. Expand checks the target of each line and fills in what
// the line does not name (a tool's defaults); the targets of lines that share an
// address are then merged (MergeTarget). A bad line is a *LineError naming it.
type Targets struct {
	Expand func(Target) (Target, error)
}

func (g Targets) entries() Entries[netip.Addr, Target] {
	return Entries[netip.Addr, Target]{
		Parse: func(l Line) (netip.Addr, Target, error) {
			t, err := ParseTarget(l.Text)
			if err == nil && g.Expand != nil {
				t, err = g.Expand(t)
			}
			return t.Addr, t, err
		},
		Merge: MergeTarget,
	}
}

// Scan reads the targets of r; name is its name in errors.
func (g Targets) Scan(r io.Reader, name string) ([]Target, error) { return g.entries().Scan(r, name) }

// ReadFile reads the targets file at path ("-": standard input); a file that cannot be
// opened is an *OpenError.
func (g Targets) ReadFile(path string) ([]Target, error) { return g.entries().ReadFile(path) }
