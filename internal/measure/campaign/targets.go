package campaign

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/store"
)

// Endpoint is one (protocol, port) of a resolver, with the DoQ ALPN to offer.
type Endpoint struct {
	Protocol measure.Protocol
	Port     uint16
	ALPN     string // DoQ: the verified ALPN
}

// Target is one resolver and the endpoints to measure on it.
type Target struct {
	Addr       netip.Addr
	ServerName string
	Endpoints  []Endpoint
}

// defaultEndpoints are the optimistic endpoints of every resolver (issue 6): DoUDP and
// DoTCP on 53, DoT on 853, DoH on 443, DoH3 on 443; DoQ comes from verification.
func defaultEndpoints(p measure.Protocol) []Endpoint {
	switch p {
	case measure.DoUDP:
		return []Endpoint{{measure.DoUDP, measure.PortDNS, ""}}
	case measure.DoTCP:
		return []Endpoint{{measure.DoTCP, measure.PortDNS, ""}}
	case measure.DoT:
		return []Endpoint{{measure.DoT, measure.PortDoT, ""}}
	case measure.DoH:
		return []Endpoint{{measure.DoH, measure.PortHTTPS, ""}}
	case measure.DoH3:
		return []Endpoint{{measure.DoH3, measure.PortHTTPS, ""}}
	case measure.DoQ:
		return []Endpoint{{measure.DoQ, doq.PortRFC9250, doq.Versions[0].ALPN}}
	}
	return nil
}

// ParseTargets reads a targets file: one resolver per line,
//
//	ADDRESS [sni=NAME] [PROTOCOL=PORT[/ALPN] ...]
//
// e.g. "198.19.0.7 doq=853/doq doq=784/doq-i02". A protocol not named gets its default
// endpoint; '#' starts a comment.
func ParseTargets(r io.Reader) ([]Target, error) {
	var out []Target
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		addr, err := netip.ParseAddr(f[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		t := Target{Addr: addr.Unmap()}
		named := map[measure.Protocol]bool{}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return nil, fmt.Errorf("line %d: %q is not PROTOCOL=PORT[/ALPN]", line, kv)
			}
			if k == "sni" {
				t.ServerName = v
				continue
			}
			p := measure.Protocol(k)
			if _, err := measure.For(p); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			portS, alpn, _ := strings.Cut(v, "/")
			port, err := strconv.ParseUint(portS, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("line %d: port %q: %w", line, portS, err)
			}
			if p == measure.DoQ {
				if alpn == "" {
					alpn = doq.Versions[0].ALPN
				}
				if _, ok := doq.Lookup(alpn); !ok {
					return nil, fmt.Errorf("line %d: unknown DoQ ALPN %q", line, alpn)
				}
			}
			named[p] = true
			t.Endpoints = append(t.Endpoints, Endpoint{p, uint16(port), alpn})
		}
		for _, p := range measure.Protocols {
			if !named[p] {
				t.Endpoints = append(t.Endpoints, defaultEndpoints(p)...)
			}
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadTargetsFile reads a targets file (see ParseTargets).
func ReadTargetsFile(path string) ([]Target, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseTargets(f)
}

// LatestRun returns the newest verification run with DoQ-verified resolvers.
func LatestRun(ctx context.Context, s *store.Store) (int64, error) {
	var id int64
	err := s.Pool.QueryRow(ctx, `SELECT r.run_id FROM verification_runs r
		WHERE EXISTS (SELECT 1 FROM verification_results v WHERE v.run_id = r.run_id AND v.outcome = 'doq-verified')
		ORDER BY r.started_at DESC, r.run_id DESC LIMIT 1`).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("latest verification run with DoQ-verified resolvers: %w", err)
	}
	return id, nil
}

// LoadTargets returns the DoQ-verified resolvers of a verification run, each with its
// verified DoQ ports (and ALPNs) plus the default endpoints of the other protocols.
func LoadTargets(ctx context.Context, s *store.Store, runID int64) ([]Target, error) {
	rows, err := s.Pool.Query(ctx, `SELECT address, port, coalesce(alpn, ''), coalesce(sni, '')
		FROM verification_results WHERE run_id = $1 AND outcome = 'doq-verified' ORDER BY address, port`, runID)
	if err != nil {
		return nil, fmt.Errorf("load targets of run %d: %w", runID, err)
	}
	defer rows.Close()
	byAddr := map[netip.Addr]*Target{}
	for rows.Next() {
		var (
			addr      netip.Addr
			port      int32
			alpn, sni string
		)
		if err := rows.Scan(&addr, &port, &alpn, &sni); err != nil {
			return nil, fmt.Errorf("load targets: %w", err)
		}
		if alpn == "" {
			alpn = doq.Versions[0].ALPN
		}
		t := byAddr[addr]
		if t == nil {
			t = &Target{Addr: addr.Unmap(), ServerName: sni}
			byAddr[addr] = t
		}
		t.Endpoints = append(t.Endpoints, Endpoint{measure.DoQ, uint16(port), alpn})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load targets: %w", err)
	}
	out := make([]Target, 0, len(byAddr))
	for _, t := range byAddr {
		for _, p := range measure.Protocols {
			if p != measure.DoQ {
				t.Endpoints = append(t.Endpoints, defaultEndpoints(p)...)
			}
		}
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Less(out[j].Addr) })
	return out, nil
}
