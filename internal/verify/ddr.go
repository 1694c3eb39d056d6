package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/store"
)

// DDRName is the special-use name a client asks its resolver for the encrypted
// resolvers it designates (RFC 9462 §4).
const DDRName = "_dns.resolver.arpa."

// DDR query statuses (ddr_queries.status).
const (
	DDRDesignations = "designations" // SVCB records in the answer
	DDRNone         = "none"         // NOERROR without SVCB records
	DDRNXDomain     = "nxdomain"
	DDRRefused      = "refused"
	DDRDNSError     = "dns-error" // another rcode
	DDRTimeout      = "timeout"
	DDRBadResponse  = "bad-response"
	DDRError        = "error"
)

// DDRPortDoQ is the port of a designation offering DoQ without a port SvcParam: DoQ's
// (RFC 9250 §8.2). RFC 9461 §2: the port SvcParam, else the protocol's default.
const DDRPortDoQ = 853

// DDRAnswer is a DNS/53 responder's answer to _dns.resolver.arpa SVCB.
type DDRAnswer struct {
	Resolver     netip.Addr
	Status       string
	Rcode        *int
	Designations []Designation
	Detail       string
	At           time.Time
}

// Designation is one designated resolver (a ServiceMode SVCB record, RFC 9460 §2.4.3).
type Designation struct {
	Priority  uint16
	Target    string
	ALPNs     []string
	Port      uint16 // 0: no port SvcParam
	DoHPath   string
	IPv4Hints []netip.Addr
	IPv6Hints []netip.Addr
}

// DoQEndpoints are the DoQ endpoints a designation names: each address hint on its port
// (DDRPortDoQ without one), when one of its ALPNs is a DoQ ALPN. A designation without
// hints names none here: resolving its target through the responder is left out.
func (d Designation) DoQEndpoints() []netip.AddrPort {
	offers := slices.ContainsFunc(d.ALPNs, func(a string) bool { _, ok := doq.Lookup(a); return ok })
	if !offers {
		return nil
	}
	port := d.Port
	if port == 0 {
		port = DDRPortDoQ
	}
	var out []netip.AddrPort
	for _, h := range append(slices.Clone(d.IPv4Hints), d.IPv6Hints...) {
		out = append(out, netip.AddrPortFrom(h.Unmap(), port))
	}
	return out
}

// QueryDDR asks resolver (port 53) for _dns.resolver.arpa SVCB over UDP, and over TCP
// when the answer is truncated, within timeout.
func QueryDDR(ctx context.Context, resolver netip.Addr, timeout time.Duration) DDRAnswer {
	ans := DDRAnswer{Resolver: resolver, At: time.Now()}
	q := new(dns.Msg)
	q.SetQuestion(DDRName, dns.TypeSVCB)
	q.RecursionDesired = true
	q.SetEdns0(1232, false)
	addr := netip.AddrPortFrom(resolver, 53).String()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Two tries over UDP, each half the time: one datagram lost on the way is not the
	// resolver's silence.
	c := &dns.Client{Net: "udp", Timeout: timeout / 2}
	r, _, err := c.ExchangeContext(ctx, q, addr)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
		r, _, err = c.ExchangeContext(ctx, q, addr)
	}
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.ExchangeContext(ctx, q, addr)
	}
	if err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			ans.Status, ans.Detail = DDRTimeout, "no answer within "+timeout.String()
		case errors.Is(err, dns.ErrId) || errors.Is(err, dns.ErrShortRead) || isUnpackError(err):
			ans.Status, ans.Detail = DDRBadResponse, err.Error()
		default:
			ans.Status, ans.Detail = DDRError, err.Error()
		}
		return ans
	}
	if !r.Response || len(r.Question) != 1 || dns.CanonicalName(r.Question[0].Name) != DDRName || r.Question[0].Qtype != dns.TypeSVCB {
		ans.Status, ans.Detail = DDRBadResponse, "the reply does not answer the query"
		return ans
	}
	rc := r.Rcode
	ans.Rcode = &rc
	switch rc {
	case dns.RcodeSuccess:
	case dns.RcodeNameError:
		ans.Status = DDRNXDomain
		return ans
	case dns.RcodeRefused:
		ans.Status = DDRRefused
		return ans
	default:
		ans.Status, ans.Detail = DDRDNSError, dns.RcodeToString[rc]
		return ans
	}
	for _, rr := range r.Answer {
		sv, ok := rr.(*dns.SVCB)
		if !ok || dns.CanonicalName(sv.Hdr.Name) != DDRName || sv.Priority == 0 {
			continue // another type (a CNAME), another owner, or AliasMode (not used by DDR)
		}
		ans.Designations = append(ans.Designations, designationOf(sv))
	}
	ans.Status = DDRNone
	if len(ans.Designations) > 0 {
		ans.Status = DDRDesignations
	}
	return ans
}

func isUnpackError(err error) bool {
	var de *dns.Error
	return errors.As(err, &de)
}

func designationOf(sv *dns.SVCB) Designation {
	d := Designation{Priority: sv.Priority, Target: sv.Target}
	for _, kv := range sv.Value {
		switch v := kv.(type) {
		case *dns.SVCBAlpn:
			d.ALPNs = append(d.ALPNs, v.Alpn...)
		case *dns.SVCBPort:
			d.Port = v.Port
		case *dns.SVCBDoHPath:
			d.DoHPath = v.Template
		case *dns.SVCBIPv4Hint:
			for _, ip := range v.Hint {
				if a, ok := netip.AddrFromSlice(ip.To4()); ok {
					d.IPv4Hints = append(d.IPv4Hints, a)
				}
			}
		case *dns.SVCBIPv6Hint:
			for _, ip := range v.Hint {
				if a, ok := netip.AddrFromSlice(ip); ok {
					d.IPv6Hints = append(d.IPv6Hints, a.Unmap())
				}
			}
		}
	}
	return d
}

// ScanDNSResponders returns the addresses that answered the scans' DNS probe on UDP/53
// (reply_kind 'dns'), in address order.
func ScanDNSResponders(ctx context.Context, s *store.Store, scanIDs []int64) ([]netip.Addr, error) {
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT address FROM scan_replies
		WHERE scan_id = ANY($1) AND reply_kind = 'dns' AND port = 53 ORDER BY address`, scanIDs)
	if err != nil {
		return nil, fmt.Errorf("select DNS responders: %w", err)
	}
	defer rows.Close()
	var out []netip.Addr
	for rows.Next() {
		var a netip.Addr
		if err := rows.Scan(&a); err != nil {
			return nil, err
		}
		out = append(out, a.Unmap())
	}
	return out, rows.Err()
}

// discoverDDR asks every resolver not asked in this run yet (conc at once, lim new
// ones per second) and stores each answer with its designations; it returns every DoQ
// endpoint designated in the run (earlier invocations included), each once, with the
// number of responders asked now. Answers cut short by cancellation are not stored.
func discoverDDR(ctx context.Context, s *store.Store, runID int64, resolvers []netip.Addr, conc int, lim *rate.Limiter,
	timeout time.Duration, log *slog.Logger) ([]netip.AddrPort, int, error) {
	done := map[netip.Addr]bool{}
	rows, err := s.Pool.Query(ctx, `SELECT address FROM ddr_queries WHERE run_id = $1`, runID)
	if err != nil {
		return nil, 0, fmt.Errorf("ddr queries done: %w", err)
	}
	for rows.Next() {
		var a netip.Addr
		if err := rows.Scan(&a); err != nil {
			rows.Close()
			return nil, 0, err
		}
		done[a.Unmap()] = true
	}
	rows.Close()
	var todo []netip.Addr
	for _, a := range resolvers {
		if !done[a] {
			todo = append(todo, a)
		}
	}
	if len(todo) > 0 {
		log.Info("DDR: asking DNS responders for their designated resolvers", "responders", len(todo), "already_asked", len(resolvers)-len(todo))
	}
	answers := make([]DDRAnswer, len(todo))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(conc, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				answers[i] = QueryDDR(ctx, todo[i], timeout)
			}
		}()
	}
feed:
	for i := range todo {
		if lim != nil && lim.Wait(ctx) != nil {
			break
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	asked := 0
	if ctx.Err() == nil {
		var qrows []store.DDRQuery
		var drows []store.DDRDesignation
		for _, a := range answers {
			qrows = append(qrows, ddrQueryRow(runID, a))
			for i, d := range a.Designations {
				drows = append(drows, ddrDesignationRow(runID, a.Resolver, i, d))
			}
		}
		wctx := context.WithoutCancel(ctx)
		if _, err := store.Insert(wctx, s, store.TableDDRQueries, qrows); err != nil {
			return nil, 0, err
		}
		if _, err := store.Insert(wctx, s, store.TableDDRDesignations, drows); err != nil {
			return nil, 0, err
		}
		asked = len(qrows)
	}
	eps, err := runDDREndpoints(ctx, s, runID)
	return eps, asked, err
}

// runDDREndpoints reads the DoQ endpoints designated in a run, each once, in order.
func runDDREndpoints(ctx context.Context, s *store.Store, runID int64) ([]netip.AddrPort, error) {
	rows, err := s.Pool.Query(ctx, `SELECT priority, target, alpns, port, ipv4hints, ipv6hints FROM ddr_designations
		WHERE run_id = $1 ORDER BY resolver, seq`, runID)
	if err != nil {
		return nil, fmt.Errorf("ddr designations: %w", err)
	}
	defer rows.Close()
	seen := map[netip.AddrPort]bool{}
	var out []netip.AddrPort
	for rows.Next() {
		var (
			d    Designation
			prio int32
			port *int32
		)
		if err := rows.Scan(&prio, &d.Target, &d.ALPNs, &port, &d.IPv4Hints, &d.IPv6Hints); err != nil {
			return nil, err
		}
		if port != nil {
			d.Port = uint16(*port)
		}
		for _, ep := range d.DoQEndpoints() {
			if !seen[ep] {
				seen[ep] = true
				out = append(out, ep)
			}
		}
	}
	return out, rows.Err()
}

func ddrQueryRow(runID int64, a DDRAnswer) store.DDRQuery {
	row := store.DDRQuery{RunID: runID, Address: a.Resolver, Status: a.Status, Detail: a.Detail, QueriedAt: a.At}
	if a.Rcode != nil {
		row.Rcode = ptr(int16(*a.Rcode))
		row.Records = ptr(int16(min(len(a.Designations), 32767)))
	}
	return row
}

func ddrDesignationRow(runID int64, resolver netip.Addr, seq int, d Designation) store.DDRDesignation {
	row := store.DDRDesignation{RunID: runID, Resolver: resolver, Seq: int16(min(seq, 32767)), Priority: int32(d.Priority),
		Target: d.Target, ALPNs: nonNil(d.ALPNs), IPv4Hints: d.IPv4Hints, IPv6Hints: d.IPv6Hints}
	if row.IPv4Hints == nil {
		row.IPv4Hints = []netip.Addr{}
	}
	if row.IPv6Hints == nil {
		row.IPv6Hints = []netip.Addr{}
	}
	if d.Port != 0 {
		row.Port = ptr(int32(d.Port))
	}
	if d.DoHPath != "" {
		row.DoHPath = ptr(d.DoHPath)
	}
	return row
}
