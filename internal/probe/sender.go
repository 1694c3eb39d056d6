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
	if c.Cooldown <= 0 {
		c.Cooldown = 3 * time.Second
	}
	if c.Safety == nil {
		return nil, errors.New("send: no safety policy (allowlist and blocklist)")
	}
	var allowed []netip.Addr
	blocked := 0
	guard := labnet.NewGuard()
	for _, a := range c.Hitlist {
		a = a.Unmap()
		if !c.Safety.InTargets(a) {
			return nil, fmt.Errorf("%w: %s", ErrOutsideAllowlist, a)
		}
		ok, why := c.Safety.Allowed(a)
		switch {
		case ok:
			if err := guard.Check(a); err != nil {
				return nil, err
			}
			allowed = append(allowed, a)
		default:
			blocked++
			c.Log.Info("skipping blocklisted address", "addr", a, "why", why)
		}
	}
	pl, err := newPlan(c.QUIC, c.DNS, c.QUICPorts, c.DNSPorts)
	if err != nil {
		return nil, err
	}
	quicPkt, dnsPkt, ports, order, cl := pl.quicPkt, pl.dnsPkt, pl.kinds, pl.order, pl.cl
	var scanID int64
	if c.Store != nil {
		if err := c.Store.EnsureVantage(ctx, store.Vantage{ID: c.VantageID, Location: c.VantageLocation, Contact: c.VantageContact}); err != nil {
			return nil, err
		}
		pv := int64(c.QUIC.Version)
		r := int32(math.Round(c.Rate)) // MinSendRate..MaxRate: inside an int32
		var tg []string
		for _, t := range c.Safety.Targets {
			tg = append(tg, t.String())
		}
		scanID, _, err = c.Store.StartScan(ctx, store.Scan{ISOWeek: c.Week, VantageID: c.VantageID, Label: c.Label,
			Shards: 1, Ports: pl.ports32(), ProbeVersion: &pv, Sender: "builtin", Targets: strings.Join(tg, " "), RatePPS: &r,
			Provenance: pl.provenance(c.VantageID, c.VantageLocation, c.VantageContact, nil).JSON()})
		if err != nil {
			return nil, err
		}
		for _, p := range order {
			if err := c.Store.StartScanRun(ctx, store.ScanRun{ScanID: scanID, Port: int32(p), ProbeKind: string(ports[p])}); err != nil {
				return nil, err
			}
		}
	}
	conns := map[bool]*net.UDPConn{} // is4 -> socket
	for _, a := range allowed {
		if conns[a.Is4()] != nil {
			continue
		}
		network := "udp6"
		if a.Is4() {
			network = "udp4"
		}
		uc, err := net.ListenUDP(network, nil)
		if err != nil {
			return nil, fmt.Errorf("send: open %s socket: %w", network, err)
		}
		defer uc.Close()
		conns[a.Is4()] = uc
	}
	// Replies are accepted only from (address, port) pairs we probed, once each.
	var mu sync.Mutex
	sent := map[target]bool{}
	seen := map[target]bool{}
	replies := make(chan Reply, 1024)
	var rwg sync.WaitGroup
	for _, uc := range conns {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			buf := make([]byte, 65536)
			for {
				n, from, err := uc.ReadFromUDPAddrPort(buf)
				if err != nil {
					return // closed
				}
				t := target{from.Addr().Unmap(), from.Port()}
				mu.Lock()
				ok := sent[t] && !seen[t]
				seen[t] = seen[t] || ok
				mu.Unlock()
				if !ok {
					continue
				}
				replies <- Reply{Addr: t.addr, Port: t.port, Sport: int(t.port), Payload: append([]byte(nil), buf[:n]...),
					ICMPType: -1, Received: time.Now().UTC()}
			}
		}()
	}
	in := NewIngest(c.Store, scanID, cl, c.Log)
	ingestErr := make(chan error, 1)
	go func() {
		var first error
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case r, ok := <-replies:
				if !ok {
					if err := in.Flush(context.WithoutCancel(ctx)); err != nil && first == nil {
						first = err
					}
					ingestErr <- first
					return
				}
				if err := in.Add(ctx, r); err != nil && first == nil {
					first = err
				}
			case <-tick.C:
				if err := in.Flush(ctx); err != nil && first == nil {
					first = err
				}
			}
		}
	}()
	lim := rate.NewLimiter(rate.Limit(c.Rate), 1)
	start := time.Now()
	perPort := map[uint16]int64{}
	var sendErr error
send:
	for _, port := range order {
		pkt := quicPkt
		if ports[port] == ProbeDNS {
			pkt = dnsPkt
		}
		for _, a := range allowed {
			if err := lim.Wait(ctx); err != nil {
				sendErr = err
				break send
			}
			t := target{a, port}
			mu.Lock()
			sent[t] = true
			mu.Unlock()
			if _, err := conns[a.Is4()].WriteToUDPAddrPort(pkt, netip.AddrPortFrom(a, port)); err != nil {
				c.Log.Debug("send failed", "addr", a, "port", port, "err", err)
				continue
			}
			perPort[port]++
		}
	}
	sendDur := time.Since(start)
	// Cooldown: replies still in flight.
	if sendErr == nil {
		select {
		case <-ctx.Done():
			sendErr = ctx.Err()
		case <-time.After(c.Cooldown):
		}
	}
	for _, uc := range conns {
		uc.Close()
	}
	rwg.Wait()
	close(replies)
	ierr := <-ingestErr
	sum := &Summary{ScanID: scanID, Week: c.Week, Vantage: c.VantageID, Label: c.Label, Shards: 1, Sender: "builtin",
		Version: fmt.Sprintf("0x%08x", c.QUIC.Version), Status: "ok", DurationS: time.Since(start).Seconds()}
	for _, port := range order {
		ps := PortSummary{Port: port, Probe: ports[port], Status: "ok", ProbesSent: perPort[port], ByKind: in.Counts[port],
			Blocklisted: int64(blocked), DurationS: sendDur.Seconds()}
		if ps.ByKind == nil {
			ps.ByKind = map[Kind]int64{}
		}
		for _, v := range ps.ByKind {
			ps.Replies += v
		}
		hits := ps.ByKind[KindQUICVN]
		if ports[port] == ProbeDNS {
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
	err = errors.Join(sendErr, ierr)
	if err != nil {
		sum.Status = store.RunStatusOf(ctx, err)
	}
	if c.Store != nil {
		for _, ps := range sum.Ports {
			st := ps.Status
			if err != nil {
				st = sum.Status
			}
			s, r, b := ps.ProbesSent, ps.Replies, ps.Blocklisted
			c.Store.FinishScanRun(context.WithoutCancel(ctx), scanID, int32(ps.Port), st, &s, &r, &b) //nolint:errcheck // best effort on the way out: the run is already failing with its own error
		}
		js, _ := json.Marshal(sum)
		if ferr := c.Store.FinishScan(context.WithoutCancel(ctx), scanID, sum.Status, js); ferr != nil && err == nil {
			err = ferr
		}
	}
	return sum, err
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
