package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/store"
)

// SendConfig is a scan of an explicit hitlist with the built-in sender: the same probes,
// classifier, safety rules and store rows as the zmap scan, for lists zmap cannot scan
// (IPv6; zmap 2.1.1 is IPv4-only) or small lists.
type SendConfig struct {
	Store     *store.Store
	Log       *slog.Logger
	VantageID string
	Label     string // default "hitlist"
	Week      string
	QUICPorts []uint16
	DNSPorts  []uint16
	QUIC      QUICProbe
	DNS       DNSProbe
	Hitlist   []netip.Addr
	Safety    *Safety       // allowlist + blocklist; every address must be inside the allowlist
	Rate      float64       // probes per second (token bucket, burst 1)
	Cooldown  time.Duration // wait for replies after the last probe
	// VantageLocation and VantageContact describe the vantage point (vantage_points and
	// the scan's provenance); "" keeps what the database has.
	VantageLocation, VantageContact string
}

// ErrOutsideAllowlist refuses a hitlist with an address outside the allowlist.
var ErrOutsideAllowlist = errors.New("hitlist address outside the allowlist")

type target struct {
	addr netip.Addr
	port uint16
}

// Send probes every (address, port) of the hitlist at the configured rate and ingests
// the replies. An address outside the allowlist refuses the whole run before any packet
// is sent; a blocklisted address is skipped and counted.
//
// Its steps: planSend (the hitlist checked against the safety policy, the probes, the
// scan's rows), openSockets, run (receivers, ingest, the paced sender, the cooldown,
// the summary) and finish (the rows closed).
func Send(ctx context.Context, c SendConfig) (_ *Summary, retErr error) {
	if c.Label == "" {
		c.Label = "hitlist"
	}
	defaultRun(&c.Log, &c.Week, &c.QUICPorts, &c.DNSPorts, &c.QUIC, &c.DNS)
	if !(c.Rate >= MinSendRate && c.Rate <= MaxRate) { // NaN too
		return nil, fmt.Errorf("%w: send needs a rate of %v..%d probes/s, got %v", ErrBadRate, MinSendRate, MaxRate, c.Rate)
	}
	ctx, release, err := holdScanLock(ctx, c.Store, ScanLockKey(c.Week, c.VantageID, c.Label, 0), c.Log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if lost := release(); lost != nil {
			retErr = errors.Join(retErr, lost)
		}
	}()
	r, err := planSend(ctx, c)
	if err != nil {
		return nil, err
	}
	defer r.closeSockets()
	if err := r.openSockets(); err != nil {
		return nil, err
	}
	sum, err := r.run(ctx)
	return sum, r.finish(ctx, sum, err)
}

// sendRun is one run of Send: what its steps share.
type sendRun struct {
	c       SendConfig // Cooldown set
	pl      *plan
	allowed []netip.Addr // the hitlist's addresses to probe (unmapped)
	blocked int          // the hitlist's blocklisted addresses (not probed)
	scanID  int64        // 0 without a store
	conns   map[bool]*net.UDPConn
	gate    replyGate
	in      *Ingest
	perPort map[uint16]int64 // probes sent
}

// replyGate accepts replies only from (address, port) pairs that were probed, once each.
type replyGate struct {
	mu   sync.Mutex
	sent map[target]bool
	seen map[target]bool
}

// probed records that t was sent a probe.
func (g *replyGate) probed(t target) {
	g.mu.Lock()
	g.sent[t] = true
	g.mu.Unlock()
}

// accept says whether a reply from t is the first from a probed pair.
func (g *replyGate) accept(t target) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ok := g.sent[t] && !g.seen[t]
	g.seen[t] = g.seen[t] || ok
	return ok
}

// planSend checks the run (a safety policy; every hitlist address inside the allowlist
// and the lab guard, blocklisted ones skipped), builds the probes, and opens the scan's
// rows (with a store). Nothing is sent before it returns.
func planSend(ctx context.Context, c SendConfig) (*sendRun, error) {
	if c.Cooldown <= 0 {
		c.Cooldown = 3 * time.Second
	}
	if c.Safety == nil {
		return nil, errors.New("send: no safety policy (allowlist and blocklist)")
	}
	r := &sendRun{c: c, conns: map[bool]*net.UDPConn{}, perPort: map[uint16]int64{},
		gate: replyGate{sent: map[target]bool{}, seen: map[target]bool{}}}
	if err := r.checkHitlist(); err != nil {
		return nil, err
	}
	var err error
	if r.pl, err = newPlan(c.QUIC, c.DNS, c.QUICPorts, c.DNSPorts); err != nil {
		return nil, err
	}
	if err := r.startScan(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// checkHitlist refuses a hitlist address outside the allowlist (ErrOutsideAllowlist) or
// the lab guard, and sorts the others into allowed and blocklisted (logged, counted).
func (r *sendRun) checkHitlist() error {
	guard := labnet.NewGuard()
	for _, a := range r.c.Hitlist {
		a = a.Unmap()
		if !r.c.Safety.InTargets(a) {
			return fmt.Errorf("%w: %s", ErrOutsideAllowlist, a)
		}
		ok, why := r.c.Safety.Allowed(a)
		switch {
		case ok:
			if err := guard.Check(a); err != nil {
				return err
			}
			r.allowed = append(r.allowed, a)
		default:
			r.blocked++
			r.c.Log.Info("skipping blocklisted address", "addr", a, "why", why)
		}
	}
	return nil
}

// startScan records the vantage point and opens the scan's row and its ports' rows
// (with a store).
func (r *sendRun) startScan(ctx context.Context) error {
	c := r.c
	if c.Store == nil {
		return nil
	}
	if err := c.Store.EnsureVantage(ctx, store.Vantage{ID: c.VantageID, Location: c.VantageLocation, Contact: c.VantageContact}); err != nil {
		return err
	}
	pv := int64(c.QUIC.Version)
	pps := int32(math.Round(c.Rate)) // MinSendRate..MaxRate: inside an int32
	var tg []string
	for _, t := range c.Safety.Targets {
		tg = append(tg, t.String())
	}
	var err error
	r.scanID, _, err = c.Store.StartScan(ctx, store.Scan{ISOWeek: c.Week, VantageID: c.VantageID, Label: c.Label,
		Shards: 1, Ports: r.pl.ports32(), ProbeVersion: &pv, Sender: "builtin", Targets: strings.Join(tg, " "), RatePPS: &pps,
		Provenance: r.pl.provenance(c.VantageID, c.VantageLocation, c.VantageContact, nil).JSON()})
	if err != nil {
		return err
	}
	for _, p := range r.pl.order {
		if err := c.Store.StartScanRun(ctx, store.ScanRun{ScanID: r.scanID, Port: int32(p), ProbeKind: string(r.pl.kinds[p])}); err != nil {
			return err
		}
	}
	return nil
}

// openSockets opens one UDP socket per address family of the allowed addresses.
func (r *sendRun) openSockets() error {
	for _, a := range r.allowed {
		if r.conns[a.Is4()] != nil {
			continue
		}
		network := "udp6"
		if a.Is4() {
			network = "udp4"
		}
		uc, err := net.ListenUDP(network, nil)
		if err != nil {
			return fmt.Errorf("send: open %s socket: %w", network, err)
		}
		r.conns[a.Is4()] = uc
	}
	return nil
}

// closeSockets closes the sockets, which ends their receivers.
func (r *sendRun) closeSockets() {
	for _, uc := range r.conns {
		uc.Close()
	}
}

// run starts a receiver per socket and the ingest, sends the probes at the configured
// rate, waits the cooldown for replies in flight (unless sending failed), stops the
// receivers and the ingest, and returns the summary with the first sending or ingest
// error.
func (r *sendRun) run(ctx context.Context) (*Summary, error) {
	replies := make(chan Reply, 1024)
	var rwg sync.WaitGroup
	for _, uc := range r.conns {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			r.receive(uc, replies)
		}()
	}
	r.in = NewIngest(r.c.Store, r.scanID, r.pl.cl, r.c.Log)
	ingestErr := make(chan error, 1)
	go func() { ingestErr <- r.ingest(ctx, replies) }()
	start := time.Now()
	sendErr := r.sendProbes(ctx)
	sendDur := time.Since(start)
	// Cooldown: replies still in flight.
	if sendErr == nil {
		select {
		case <-ctx.Done():
			sendErr = ctx.Err()
		case <-time.After(r.c.Cooldown):
		}
	}
	r.closeSockets()
	rwg.Wait()
	close(replies)
	ierr := <-ingestErr
	return r.summary(time.Since(start), sendDur), errors.Join(sendErr, ierr)
}

// receive passes the replies uc reads that the gate accepts to replies, until uc is
// closed.
func (r *sendRun) receive(uc *net.UDPConn, replies chan<- Reply) {
	buf := make([]byte, 65536)
	for {
		n, from, err := uc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return // closed
		}
		t := target{from.Addr().Unmap(), from.Port()}
		if !r.gate.accept(t) {
			continue
		}
		replies <- Reply{Addr: t.addr, Port: t.port, Sport: int(t.port), Payload: append([]byte(nil), buf[:n]...),
			ICMPType: -1, Received: time.Now().UTC()}
	}
}

// ingest classifies and stores the replies until the channel is closed, writing a
// batch every second, and returns the first error.
func (r *sendRun) ingest(ctx context.Context, replies <-chan Reply) error {
	var first error
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case rep, ok := <-replies:
			if !ok {
				if err := r.in.Flush(context.WithoutCancel(ctx)); err != nil && first == nil {
					first = err
				}
				return first
			}
			if err := r.in.Add(ctx, rep); err != nil && first == nil {
				first = err
			}
		case <-tick.C:
			if err := r.in.Flush(ctx); err != nil && first == nil {
				first = err
			}
		}
	}
}

// sendProbes sends every port's probe to every allowed address, port by port in scan
// order, at the configured rate (a failed send is logged at debug and not counted).
func (r *sendRun) sendProbes(ctx context.Context) error {
	lim := rate.NewLimiter(rate.Limit(r.c.Rate), 1)
	for _, port := range r.pl.order {
		pkt := r.pl.packet(port)
		for _, a := range r.allowed {
			if err := lim.Wait(ctx); err != nil {
				return err
			}
			t := target{a, port}
			r.gate.probed(t)
			if _, err := r.conns[a.Is4()].WriteToUDPAddrPort(pkt, netip.AddrPortFrom(a, port)); err != nil {
				r.c.Log.Debug("send failed", "addr", a, "port", port, "err", err)
				continue
			}
			r.perPort[port]++
		}
	}
	return nil
}

// summary is the run's summary: per port the probes sent and the replies by kind; the
// achieved rate over the time spent sending.
func (r *sendRun) summary(dur, sendDur time.Duration) *Summary {
	c := r.c
	sum := &Summary{ScanID: r.scanID, Week: c.Week, Vantage: c.VantageID, Label: c.Label, Shards: 1, Sender: "builtin",
		Version: fmt.Sprintf("0x%08x", c.QUIC.Version), Status: "ok", DurationS: dur.Seconds()}
	for _, port := range r.pl.order {
		ps := PortSummary{Port: port, Probe: r.pl.kinds[port], Status: "ok", ProbesSent: r.perPort[port], ByKind: r.in.Counts[port],
			Blocklisted: int64(r.blocked), DurationS: sendDur.Seconds()}
		if ps.ByKind == nil {
			ps.ByKind = map[Kind]int64{}
		}
		for _, v := range ps.ByKind {
			ps.Replies += v
		}
		hits := ps.ByKind[KindQUICVN]
		if r.pl.kinds[port] == ProbeDNS {
			hits = ps.ByKind[KindDNS]
		}
		if ps.ProbesSent > 0 {
			ps.HitRate = float64(hits) / float64(ps.ProbesSent)
		}
		sum.add(ps)
	}
	if sendDur > 0 {
		sum.RatePPS = float64(sum.ProbesSent) / sendDur.Seconds()
	}
	return sum
}

// finish gives the summary the status err says and closes the ports' rows and the
// scan's row (with a store); it returns err, or the error closing the scan's row.
func (r *sendRun) finish(ctx context.Context, sum *Summary, err error) error {
	if err != nil {
		sum.Status = store.RunStatusOf(ctx, err)
	}
	if r.c.Store == nil {
		return err
	}
	for _, ps := range sum.Ports {
		st := ps.Status
		if err != nil {
			st = sum.Status
		}
		s, rep, b := ps.ProbesSent, ps.Replies, ps.Blocklisted
		r.c.Store.FinishScanRun(context.WithoutCancel(ctx), r.scanID, int32(ps.Port), st, &s, &rep, &b) //nolint:errcheck // best effort on the way out: the run is already failing with its own error
	}
	js, _ := json.Marshal(sum)
	if ferr := r.c.Store.FinishScan(context.WithoutCancel(ctx), r.scanID, sum.Status, js); ferr != nil && err == nil {
		err = ferr
	}
	return err
}

// ReadHitlist reads addresses (one a line, # comments); prefixes are refused (a hitlist
// names hosts; scan prefixes with zmap).
func ReadHitlist(path string) ([]netip.Addr, error) {
	ps, err := ReadPrefixFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ps))
	for _, p := range ps {
		if !p.IsSingleIP() {
			return nil, fmt.Errorf("%w: hitlist %s: %s is a prefix, want addresses", ErrBadTargets, path, p)
		}
		out = append(out, p.Addr())
	}
	return out, nil
}
