package conncheck

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/runkey"
	"github.com/doqscan/doqscan/internal/store"
)

// Config is one check run.
type Config struct {
	Settings
	Vantage, Label, Week string
	VantageLocation      string
	VantageContact       string
	// RunID is the verification run whose resolvers are checked (0: the latest with
	// DoQ-verified resolvers); TargetsFile replaces it (measure's targets format).
	RunID       int64
	TargetsFile string
	// Protocols are those checked of each resolver (default DoQ, DoT, DoH).
	Protocols    []measure.Protocol
	Concurrency  int // resolvers checked at once
	BlocklistDir string
	// Sample > 0 checks at most this many resolver addresses, spread evenly over the
	// address order (the same ones every week while the population stays).
	Sample int
	// Only, when not empty, keeps the resolvers inside these prefixes (before Sample).
	Only []netip.Prefix
}

// Defaults and limits of a run.
const (
	DefaultConcurrency = 32
	MaxConcurrency     = 1024
)

// Validate checks the settings' ranges (usage errors naming the flag).
func (c *Config) Validate() error {
	if err := cli.FirstError(
		cli.InRange("concurrency", c.Concurrency, 1, MaxConcurrency),
		cli.InRange("max-queries", c.MaxQueries, 1, 100000),
		cli.InRange("streams", c.Streams, 1, 256),
		cli.InRange("timeout", c.Timeout, time.Millisecond, 5*time.Minute),
		cli.InRange("sample", c.Sample, 0, 1<<30),
	); err != nil {
		return err
	}
	for _, w := range c.IdleWaits {
		if err := cli.InRange("idle-waits", w, time.Millisecond, time.Hour); err != nil {
			return err
		}
	}
	for _, a := range c.TokenAges {
		if err := cli.InRange("token-ages", a, 0, time.Hour); err != nil {
			return err
		}
	}
	for _, s := range c.InitialSizes {
		if err := cli.InRange("initial-sizes", s, 1200, 1452); err != nil {
			return err
		}
	}
	for _, p := range c.Protocols {
		if p != measure.DoQ && p != measure.DoT && p != measure.DoH {
			return cli.Usagef("--protocols: %q (doq, dot, doh)", p)
		}
	}
	if c.Vantage == "" {
		return cli.Usagef("--vantage must not be empty")
	}
	return nil
}

func (c *Config) defaults() {
	c.Settings.defaults()
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.Label = cmp.Or(c.Label, "weekly")
	if len(c.Protocols) == 0 {
		c.Protocols = []measure.Protocol{measure.DoQ, measure.DoT, measure.DoH}
	}
}

// Summary is what a run found (the whole run).
type Summary struct {
	RunID        int64                     `json:"run_id"`
	Week         string                    `json:"iso_week"`
	Vantage      string                    `json:"vantage"`
	Label        string                    `json:"label"`
	VerifyRun    int64                     `json:"verification_run_id,omitempty"`
	Endpoints    int                       `json:"endpoints"`     // this invocation's
	Skipped      int                       `json:"skipped"`       // already checked in this run
	Excluded     int                       `json:"excluded"`      // never contacted
	CheckedNow   int                       `json:"checked_now"`   // this invocation
	Elapsed      float64                   `json:"elapsed_s"`     // this invocation
	Statuses     map[string]map[string]int `json:"statuses"`      // whole run: protocol -> status -> endpoints
	RetryPolicy  map[string]int            `json:"retry_policy"`  // whole run, DoQ
	ClosedAfter  map[string]int            `json:"closed_after"`  // whole run: "protocol queries" -> endpoints the server closed after that many
	Stalled      int                       `json:"stalled"`       // whole run: amplification handshakes that stalled
	AmplifProbes int                       `json:"amplification"` // whole run: amplification handshakes
	Status       store.RunStatus           `json:"status"`
}

// LockKey is the advisory lock of a check run: its week, vantage point and label.
func LockKey(week, vantage, label string) string {
	return store.RunKey("conncheck", week, vantage, label)
}

// Run checks the endpoints of a verification run (or a targets file), writes
// connection_policies and amplification_probes under a policy_runs row keyed by (week,
// vantage, label), and returns the summary. Starting the same run again checks only the
// endpoints it has not stored.
func Run(ctx context.Context, s *store.Store, cfg Config, log *slog.Logger) (_ *Summary, retErr error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sum := &Summary{Vantage: cfg.Vantage, Label: cfg.Label, Week: cmp.Or(cfg.Week, runkey.Week(time.Now()))}
	var eps []Endpoint
	var verifyRun *int64
	switch {
	case cfg.TargetsFile != "":
		ts, err := campaign.ReadTargetsFile(cfg.TargetsFile)
		if err != nil {
			return nil, fmt.Errorf("targets: %w", err)
		}
		eps = fromTargets(ts, cfg.Protocols)
	default:
		id := cfg.RunID
		if id == 0 {
			// The newest verification run of this vantage point and label: several
			// vantage points write one database, and each checks its own list.
			run, err := campaign.LatestRun(ctx, s, campaign.RunSelection{Vantage: cfg.Vantage, Label: cfg.Label})
			if err != nil {
				return nil, cli.Environmentf("%v (run verify first, or pass --targets)", err)
			}
			id = run.RunID
			log.Info("verification run", "run_id", run.RunID, "week", run.ISOWeek, "vantage", run.Vantage, "label", run.Label)
		}
		verifyRun, sum.VerifyRun = &id, id
		var err error
		if eps, err = LoadEndpoints(ctx, s, id, cfg.Protocols); err != nil {
			return nil, err
		}
	}
	eps = sample(only(eps, cfg.Only), cfg.Sample)
	var err error
	if eps, sum.Excluded, err = blocklist.ExcludeForContact(ctx, s, cfg.BlocklistDir, eps, func(e Endpoint) netip.Addr { return e.Addr.Addr() }, "endpoint", log); err != nil {
		return nil, err
	}
	guard := labnet.NewGuard()
	for _, e := range eps {
		if err := guard.Check(e.Addr.Addr()); err != nil {
			return nil, err
		}
	}
	ctx, release, err := s.HoldLock(ctx, LockKey(sum.Week, cfg.Vantage, cfg.Label), store.RetryPolicy{}, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if lost := release(); lost != nil {
			retErr = errors.Join(retErr, lost)
		}
	}()
	if err := s.EnsureVantage(ctx, store.Vantage{ID: cfg.Vantage, Location: cfg.VantageLocation, Contact: cfg.VantageContact}); err != nil {
		return nil, err
	}
	prov := provenance.New("conncheck", provenance.Vantage{ID: cfg.Vantage, Location: cfg.VantageLocation, Contact: cfg.VantageContact})
	conf, _ := json.Marshal(map[string]any{"max_queries": cfg.MaxQueries, "streams": cfg.Streams, "idle_waits_ms": msList(cfg.IdleWaits),
		"token_ages_ms": msList(cfg.TokenAges),
		"timeout_ms":    cfg.Timeout.Milliseconds(), "initial_sizes": cfg.InitialSizes, "key_shares": cfg.KeyShares,
		"amplification": !cfg.NoAmplification, "protocols": cfg.Protocols, "concurrency": cfg.Concurrency, "targets_file": cfg.TargetsFile,
		"sample": cfg.Sample, "only": cfg.Only})
	source := "verification"
	if cfg.TargetsFile != "" {
		source = "file"
	}
	var existed bool
	err = s.Pool.QueryRow(ctx, `INSERT INTO policy_runs (iso_week, vantage_id, label, verification_run_id, source, config, provenance)
		VALUES ($1, $2, $3, $4, $5, $6, jsonb_build_array($7::jsonb))
		ON CONFLICT (iso_week, vantage_id, label) DO UPDATE SET status = 'running', finished_at = NULL, config = EXCLUDED.config,
		    provenance = coalesce(policy_runs.provenance, '[]'::jsonb) || EXCLUDED.provenance
		RETURNING run_id, (xmax <> 0)`, sum.Week, cfg.Vantage, cfg.Label, verifyRun, source, conf, prov.JSON()).Scan(&sum.RunID, &existed)
	if err != nil {
		return nil, fmt.Errorf("start policy run: %w", err)
	}
	sum.Endpoints = len(eps)
	if existed {
		done, err := doneEndpoints(ctx, s, sum.RunID)
		if err != nil {
			return nil, err
		}
		kept := eps[:0]
		for _, e := range eps {
			if !done[key(e)] {
				kept = append(kept, e)
			}
		}
		sum.Skipped = len(eps) - len(kept)
		eps = kept
	}
	log.Info("connection check", "run_id", sum.RunID, "week", sum.Week, "vantage", cfg.Vantage, "label", cfg.Label,
		"verification_run", sum.VerifyRun, "endpoints", sum.Endpoints, "already_done", sum.Skipped, "concurrency", cfg.Concurrency)
	start := time.Now()
	n, runErr := checkAll(ctx, s, sum.RunID, eps, cfg, log)
	sum.CheckedNow, sum.Elapsed = n, time.Since(start).Seconds()
	sum.Status = store.RunStatusOf(ctx, runErr)
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := summarize(fctx, s, sum); err != nil && runErr == nil {
		runErr = err
	}
	js, _ := json.Marshal(sum)
	if _, err := s.Pool.Exec(fctx, `UPDATE policy_runs SET status = $2, summary = $3, finished_at = now() WHERE run_id = $1`,
		sum.RunID, string(sum.Status), js); err != nil && runErr == nil {
		runErr = err
	}
	return sum, runErr
}

// only keeps the endpoints inside one of prefixes (all when none is given).
func only(eps []Endpoint, prefixes []netip.Prefix) []Endpoint {
	if len(prefixes) == 0 {
		return eps
	}
	out := eps[:0]
	for _, e := range eps {
		for _, p := range prefixes {
			if p.Contains(e.Addr.Addr()) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// sample keeps the endpoints of at most n addresses (0: all), every k-th address in
// address order.
func sample(eps []Endpoint, n int) []Endpoint {
	var addrs []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, e := range eps {
		if a := e.Addr.Addr(); !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	if n <= 0 || len(addrs) <= n {
		return eps
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	keep := map[netip.Addr]bool{}
	for i := 0; i < n; i++ {
		keep[addrs[i*len(addrs)/n]] = true
	}
	out := eps[:0]
	for _, e := range eps {
		if keep[e.Addr.Addr()] {
			out = append(out, e)
		}
	}
	return out
}

func msList(ds []time.Duration) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Milliseconds()
	}
	return out
}

type epKey struct {
	addr  netip.AddrPort
	proto measure.Protocol
}

func key(e Endpoint) epKey { return epKey{e.Addr, e.Protocol} }

func doneEndpoints(ctx context.Context, s *store.Store, runID int64) (map[epKey]bool, error) {
	rows, err := s.Pool.Query(ctx, `SELECT address, port, protocol FROM connection_policies WHERE run_id = $1`, runID)
	if err != nil {
		return nil, fmt.Errorf("done endpoints: %w", err)
	}
	defer rows.Close()
	out := map[epKey]bool{}
	for rows.Next() {
		var a netip.Addr
		var port int32
		var proto string
		if err := rows.Scan(&a, &port, &proto); err != nil {
			return nil, err
		}
		out[epKey{netip.AddrPortFrom(a.Unmap(), uint16(port)), measure.Protocol(proto)}] = true
	}
	return out, rows.Err()
}

// fromTargets turns measure targets into endpoints of the checked protocols.
func fromTargets(ts []campaign.Target, protos []measure.Protocol) []Endpoint {
	var out []Endpoint
	for _, t := range ts {
		for _, ep := range t.Endpoints {
			for _, p := range protos {
				if ep.Protocol == p {
					out = append(out, Endpoint{Addr: netip.AddrPortFrom(t.Addr, ep.Port), Protocol: p, ALPN: ep.ALPN, ServerName: t.ServerName})
				}
			}
		}
	}
	return out
}

// LoadEndpoints returns the endpoints of a verification run's resolvers (outcome
// doq-verified, doq-refused or doq-dns-error): each verified DoQ port with its ALPN,
// verify's Retry evidence and chain size, and DoT (853) and DoH (443) of the same
// address.
func LoadEndpoints(ctx context.Context, s *store.Store, runID int64, protos []measure.Protocol) ([]Endpoint, error) {
	rows, err := s.Pool.Query(ctx, `SELECT v.address, v.port, coalesce(v.alpn, 'doq'), coalesce(v.sni, ''),
		    (q.evidence -> 'handshake' -> 'retry_token_len') IS NOT NULL AND q.evidence -> 'handshake' IS NOT NULL, q.run_id IS NOT NULL,
		    (SELECT coalesce(sum(octet_length(c.der)), 0) FROM unnest(v.cert_chain) AS f(fp) JOIN certificates c ON c.sha256 = f.fp),
		    coalesce(cardinality(v.cert_chain), 0)
		FROM verification_results v LEFT JOIN quic_stacks q USING (run_id, address, port)
		WHERE v.run_id = $1 AND v.outcome IN ('doq-verified', 'doq-refused', 'doq-dns-error')
		ORDER BY v.address, v.port`, runID)
	if err != nil {
		return nil, fmt.Errorf("load endpoints of run %d: %w", runID, err)
	}
	defer rows.Close()
	var out []Endpoint
	seen := map[netip.Addr]bool{}
	var addrs []netip.Addr
	sni := map[netip.Addr]string{}
	for rows.Next() {
		var (
			a                netip.Addr
			port             int32
			alpn, name       string
			retry, evidence  bool
			chainB, chainNum int64
		)
		if err := rows.Scan(&a, &port, &alpn, &name, &retry, &evidence, &chainB, &chainNum); err != nil {
			return nil, err
		}
		a = a.Unmap()
		e := Endpoint{Addr: netip.AddrPortFrom(a, uint16(port)), Protocol: measure.DoQ, ALPN: alpn, ServerName: name,
			ChainBytes: int(chainB), ChainCerts: int(chainNum)}
		if evidence {
			e.VerifyRetry = boolp(retry)
		}
		if has(protos, measure.DoQ) {
			out = append(out, e)
		}
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
			sni[a] = name
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		for _, p := range []measure.Protocol{measure.DoT, measure.DoH} {
			if has(protos, p) {
				out = append(out, Endpoint{Addr: netip.AddrPortFrom(a, p.DefaultPort()), Protocol: p, ServerName: sni[a]})
			}
		}
	}
	return out, nil
}

func has(ps []measure.Protocol, p measure.Protocol) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// checkAll runs the endpoints conc at a time and writes each resolver's rows as it
// ends; results cut short by cancellation are dropped (a resumed run checks them again).
func checkAll(ctx context.Context, s *store.Store, runID int64, eps []Endpoint, cfg Config, log *slog.Logger) (int, error) {
	jobs := make(chan Endpoint)
	results := make(chan Policy, cfg.Concurrency)
	var wg sync.WaitGroup
	for range min(cfg.Concurrency, len(eps)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range jobs {
				p := guarded(ctx, e, cfg.Settings, log)
				if ctx.Err() != nil {
					continue
				}
				results <- p
			}
		}()
	}
	go func() {
		defer close(jobs)
		for _, e := range eps {
			select {
			case jobs <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(results) }()
	written := 0
	var werr error
	wctx := context.WithoutCancel(ctx)
	var batch []Policy
	flush := func() {
		if werr != nil || len(batch) == 0 {
			return
		}
		if err := write(wctx, s, runID, batch); err != nil {
			werr = err
			log.Error("writing connection policies failed", "err", err)
			return
		}
		written += len(batch)
		batch = batch[:0]
	}
	for p := range results {
		batch = append(batch, p)
		if len(batch) >= 16 {
			flush()
		}
	}
	flush()
	if werr != nil {
		return written, werr
	}
	return written, ctx.Err()
}

func guarded(ctx context.Context, e Endpoint, st Settings, log *slog.Logger) (p Policy) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("checking an endpoint panicked: recorded as status error", "endpoint", e.Addr, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			p = Policy{Endpoint: e, Status: measure.StatusError, At: time.Now(), Detail: map[string]any{"error": fmt.Sprintf("panic: %v", r)}}
		}
	}()
	return Check(ctx, e, st)
}

func ptr[T any](v T) *T { return &v }

func durMS(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	return ptr(d.Milliseconds())
}

// write stores a batch of policies and their amplification handshakes in one transaction.
func write(ctx context.Context, s *store.Store, runID int64, ps []Policy) error {
	var pol []store.ConnectionPolicy
	var amp []store.AmplificationProbe
	for i := range ps {
		p := &ps[i]
		row := store.ConnectionPolicy{RunID: runID, Address: p.Addr.Addr(), Port: int32(p.Addr.Port()), Protocol: string(p.Protocol),
			Status: string(cmp.Or(p.Status, measure.StatusError)), ClosedByServer: p.ClosedByServer,
			IdleAdvertisedMS: durMS(p.IdleAdvertised), IdleAliveMS: durMS(p.IdleAlive), IdleDeadMS: durMS(p.IdleDead),
			MaxStreams: p.MaxStreams, TokenIssued: p.TokenIssued, TokenHonoured: p.TokenHonoured,
			TokenHonouredForMS: durMS(p.TokenHonouredFor), TokenRefusedAfterMS: durMS(p.TokenRefusedAfter), ZeroRTT: p.ZeroRTT,
			Resumed: p.Resumed, Detail: p.detailJSON(), CheckedAt: p.At}
		if p.QueriesSent > 0 {
			row.QueriesSent, row.QueriesAnswered = ptr(int32(p.QueriesSent)), ptr(int32(p.QueriesAnswered))
		}
		if p.CloseDetail != "" {
			row.CloseDetail = ptr(p.CloseDetail)
		}
		if p.RetryPolicy != "" {
			row.RetryPolicy = ptr(p.RetryPolicy)
		}
		if p.TicketLifetime != nil {
			row.TicketLifetimeS = ptr(int64(*p.TicketLifetime / time.Second))
		}
		pol = append(pol, row)
		for _, a := range p.Amplification {
			ar := store.AmplificationProbe{RunID: runID, Address: p.Addr.Addr(), Port: int32(p.Addr.Port()), InitialSize: int32(a.InitialSize),
				KeyShare: string(a.KeyShare), Status: string(a.Status), RetrySeen: a.RetrySeen, CheckedAt: a.At}
			if a.At.IsZero() {
				ar.CheckedAt = p.At
			}
			if p.ChainBytes > 0 {
				ar.ChainBytes, ar.ChainCerts = ptr(int32(p.ChainBytes)), ptr(int16(p.ChainCerts))
			}
			if an := a.Analysis; an != nil {
				ar.ClientBytes, ar.ServerBytesPreAck = ptr(int32(an.ClientInitialBytes)), ptr(int32(an.ServerBytesPreAck))
				ar.Budget = ptr(int32(3 * an.ClientInitialBytes))
				ar.Stalled, ar.RoundTrips, ar.Cause = ptr(an.AmplificationStall), ptr(int16(an.RoundTrips)), ptr(an.Cause)
				ar.HandshakeNS = ptr(a.Handshake.Nanoseconds())
				if an.AmplificationStall {
					ar.StallNS = ptr(an.StallNS)
				}
			}
			amp = append(amp, ar)
		}
	}
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	if _, err := store.InsertTx(ctx, tx, store.TableConnectionPolicies, pol); err != nil {
		return err
	}
	if _, err := store.InsertTx(ctx, tx, store.TableAmplificationProbes, amp); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func summarize(ctx context.Context, s *store.Store, sum *Summary) error {
	sum.Statuses, sum.RetryPolicy, sum.ClosedAfter = map[string]map[string]int{}, map[string]int{}, map[string]int{}
	rows, err := s.Pool.Query(ctx, `SELECT protocol, status, retry_policy, CASE WHEN closed_by_server THEN queries_answered END
		FROM connection_policies WHERE run_id = $1`, sum.RunID)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	for rows.Next() {
		var proto, status string
		var retry *string
		var closed *int32
		if err := rows.Scan(&proto, &status, &retry, &closed); err != nil {
			rows.Close()
			return err
		}
		if sum.Statuses[proto] == nil {
			sum.Statuses[proto] = map[string]int{}
		}
		sum.Statuses[proto][status]++
		if retry != nil {
			sum.RetryPolicy[*retry]++
		}
		if closed != nil {
			sum.ClosedAfter[fmt.Sprintf("%s %d", proto, *closed)]++
		}
	}
	rows.Close()
	return s.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE stalled), count(*) FROM amplification_probes WHERE run_id = $1`,
		sum.RunID).Scan(&sum.Stalled, &sum.AmplifProbes)
}

// WriteText prints a summary.
func (s *Summary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "connection check run %d (%s, vantage %s, label %s, verification run %d)\n", s.RunID, s.Week, s.Vantage, s.Label, s.VerifyRun)
	fmt.Fprintf(w, "this invocation: %d endpoints, %d already done, %d excluded, %d checked in %.1f s, status %s\n",
		s.Endpoints, s.Skipped, s.Excluded, s.CheckedNow, s.Elapsed, s.Status)
	protos := make([]string, 0, len(s.Statuses))
	for p := range s.Statuses {
		protos = append(protos, p)
	}
	sort.Strings(protos)
	for _, p := range protos {
		fmt.Fprintf(w, "%-4s", p)
		sts := make([]string, 0, len(s.Statuses[p]))
		for st := range s.Statuses[p] {
			sts = append(sts, st)
		}
		sort.Strings(sts)
		for _, st := range sts {
			fmt.Fprintf(w, "  %s %d", st, s.Statuses[p][st])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "DoQ Retry policy: never %d, first %d, always %d\n", s.RetryPolicy["never"], s.RetryPolicy["first"], s.RetryPolicy["always"])
	if len(s.ClosedAfter) > 0 {
		keys := make([]string, 0, len(s.ClosedAfter))
		for k := range s.ClosedAfter {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "connections the server closed, by queries answered:")
		for _, k := range keys {
			fmt.Fprintf(w, " %s: %d;", k, s.ClosedAfter[k])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "amplification handshakes: %d, stalled %d\n", s.AmplifProbes, s.Stalled)
}
