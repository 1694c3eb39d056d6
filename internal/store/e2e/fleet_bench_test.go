package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// openIn opens a store whose connections are dialled inside network namespace ns ("":
// the caller's), without migrating (the admin did).
func openIn(b *testing.B, url, ns string) *store.Store {
	cfg, err := store.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	if ns != "" {
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.Do(ns, func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return &store.Store{Pool: pool}
}

// fleetResolvers is a round's size at the study's scale.
const fleetResolvers = 1200

// storeRound writes one round's measurements (16 per resolver, the study's fresh mode)
// and RTT samples (3 per transport and port, 5 per resolver) as measure does: a
// transaction per batch of `batch` resolvers, measurements then samples. It returns the
// rows written.
func storeRound(ctx context.Context, s *store.Store, cid int64, hour time.Time, base byte, batch int) (int64, error) {
	protos := []string{"doudp", "dotcp", "dot", "doh", "doh", "doq", "doh3", "doh3"}
	variants := []string{"", "", "", "GET", "POST", "", "GET", "POST"}
	transports := []struct {
		t string
		p int32
	}{{"udp", 53}, {"tcp", 53}, {"tcp", 853}, {"tcp", 443}, {"quic", 853}}
	var total int64
	for first := 0; first < fleetResolvers; first += batch {
		var ms []store.Measurement
		var rs []store.RTTSample
		for r := first; r < min(first+batch, fleetResolvers); r++ {
			a := netip.AddrFrom4([4]byte{198, 19, base + byte(r>>8), byte(r)})
			for i, p := range protos {
				for _, phase := range []string{"warmup", "measured"} {
					k := store.MeasurementKey{CampaignID: cid, Address: a, Protocol: p, Port: 853, Variant: variants[i],
						Mode: "fresh", Phase: phase}
					ns, rc := int64(40_000_000+r), int16(0)
					ms = append(ms, store.Measurement{MeasurementID: k.ID(), CampaignID: cid, Address: a, Protocol: p,
						Port: 853, Variant: variants[i], Mode: "fresh", Phase: phase, StartedAt: hour, HandshakeNS: &ns,
						ResolveNS: &ns, Status: "ok", Rcode: &rc, Answers: []string{"192.0.2.1"}, RoundHour: hour})
				}
			}
			for _, tp := range transports {
				for seq := int16(0); seq < 3; seq++ {
					ns := int64(40_000_000 + r)
					rs = append(rs, store.RTTSample{CampaignID: cid, Address: a, Transport: tp.t, Port: tp.p, Seq: seq,
						SentAt: hour, RTTNS: &ns, Status: "ok", RoundHour: hour})
				}
			}
		}
		err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
			n, err := store.InsertTx(ctx, tx, store.TableMeasurements, ms)
			if err != nil {
				return err
			}
			m, err := store.InsertTx(ctx, tx, store.TableRTTSamples, rs)
			total += n + m
			return err
		})
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// BenchmarkFleetCopy (-benchtime 1x) prints how fast three vantage points store a round
// of fleetResolvers resolvers each, at once, into the central database over the
// simulated 80 ms path with 1 % loss (their roles, TLS, row-level security), against
// the same three rounds stored at once by the same roles over the database's Unix
// socket (no network). Goal: a round stored in under a minute.
func BenchmarkFleetCopy(b *testing.B) {
	bed, urls, admin := fleetBedB(b)
	ctx := context.Background()
	adminURL, err := bed.DBAdminURL()
	if err != nil {
		b.Fatal(err)
	}
	for _, batch := range []int{100, 400} {
		for _, remote := range []bool{true, false} {
			var wg sync.WaitGroup
			took := make([]time.Duration, fleetVantages)
			rows := make([]int64, fleetVantages)
			errs := make([]error, fleetVantages)
			start := time.Now()
			for i := 0; i < fleetVantages; i++ {
				v := fmt.Sprintf("fleet%d", i)
				var s *store.Store
				if remote {
					s = openIn(b, urls[i], bed.Vantage(i))
				} else {
					role, _ := store.VantageRole(v)
					s = openIn(b, adminURL+" user="+role, "")
				}
				hour := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC).Add(time.Duration(batch) * time.Hour)
				if !remote {
					hour = hour.Add(time.Hour)
				}
				cid, _, err := s.StartCampaign(ctx, store.Campaign{VantageID: v, Label: "bench", RoundHour: hour})
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					t0 := time.Now()
					rows[i], errs[i] = storeRound(ctx, s, cid, hour, byte(i*16), batch)
					took[i] = time.Since(t0)
				}()
			}
			wg.Wait()
			el := time.Since(start)
			var all int64
			for i := range rows {
				if errs[i] != nil {
					b.Fatalf("vantage %d: %v", i, errs[i])
				}
				all += rows[i]
			}
			where := "over the 80 ms path with 1 % loss (TLS)"
			if !remote {
				where = "over the Unix socket (no network)"
			}
			fmt.Printf("3 vantage points at once, %s, batches of %d resolvers: %d rows in %v = %.0f rows/s; per round %v %v %v\n",
				where, batch, all, el.Round(time.Millisecond), float64(all)/el.Seconds(),
				took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), took[2].Round(time.Millisecond))
		}
	}
	_ = admin
}
