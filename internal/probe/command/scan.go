package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/optout/pace"
	"github.com/doqscan/doqscan/internal/probe"
	"github.com/doqscan/doqscan/internal/runkey"
	"github.com/doqscan/doqscan/internal/store"
)

func scanFlags(fs *flag.FlagSet) runFunc {
	var tf targetFlags
	var pf probeFlags
	tf.register(fs)
	pf.register(fs)
	var (
		vf                                                   cli.VantageFlags
		label, week, out, bandwidth, iface, gw, src, zmapBin string
		shard, shards, cooldown, probesPer, threads          int
		seed                                                 uint64
		asJSON, rescan, yes                                  bool
		dbWait                                               time.Duration
	)
	rate := rateFlag{pps: probe.DefaultRate}
	vf.Register(fs)
	fs.StringVar(&label, "label", "weekly", "scan label (part of the scan's key with week, vantage and shard)")
	fs.StringVar(&week, "week", "", "ISO week of the scan, e.g. 2026-W47 (default: $DOQSCAN_RUN_KEY when jobrun runs a weekly job, else now)")
	fs.StringVar(&out, "out", home.Path("var", "scans"), "directory for zmap's raw output (<week>/<vantage>/<label>-shard<N>/<port>.csv)")
	fs.Var(&rate, "rate", "zmap -r: packets per second, always passed to zmap; \"max\": as fast as zmap can (zmap -r 0, benchmarks only); 0 is refused")
	fs.StringVar(&bandwidth, "bandwidth", "", "zmap -B: bits per second with G/M/K suffix, instead of --rate (zmap derives its rate from it)")
	cli.Uint64Var(fs, &seed, "seed", 0, 0, math.MaxUint64, "zmap --seed, shared by every shard of a scan (required with --shards > 1; default: zmap picks one)")
	cli.IntVar(fs, &shards, "shards", 1, 1, probe.MaxShards, "zmap --shards: scanners splitting one scan")
	cli.IntVar(fs, &shard, "shard", 0, 0, probe.MaxShards-1, "zmap --shard: this scanner's shard (0-indexed)")
	cli.IntVar(fs, &cooldown, "cooldown", 8, 0, probe.MaxCooldownSeconds, "zmap -c: seconds to keep receiving after the last probe")
	cli.IntVar(fs, &probesPer, "probes-per-host", 1, 1, probe.MaxProbesPerHost, "zmap -P: probes sent to each address")
	cli.IntVar(fs, &threads, "sender-threads", 1, 1, probe.MaxSenderThreads, "zmap -T: sender threads")
	fs.StringVar(&iface, "interface", "", "zmap -i (default: from the route to the first target)")
	fs.StringVar(&gw, "gateway-mac", "", "zmap -G (default: the next hop's MAC from the neighbour table)")
	fs.StringVar(&src, "source-ip", "", "zmap -S (default: the route's source address)")
	fs.StringVar(&zmapBin, "zmap", probe.DefaultZmap, "zmap binary")
	cli.RegisterJSON(fs, &asJSON, "reply the scan holds (address and port that answered; the summary goes to the log)")
	fs.BoolVar(&rescan, "rerun", false, "send every port again, also those an earlier run of this scan (week, vantage, label, shard) finished (without it, a scan run again sends only the ports it lacks); each run writes a new raw file")
	cli.Deprecate(fs, "rescan", "rerun")
	fs.BoolVar(&yes, "yes", false, "run an --internet-wide scan estimated to take longer than "+probe.FormatDuration(probe.DefaultConfirmAbove))
	cli.DurationVar(fs, &dbWait, "db-wait", probe.DefaultDBWait, time.Second, 24*time.Hour, "how long to wait for an unavailable database before stopping with exit 3 (zmap's output meanwhile goes to the raw file)")
	return func(ctx context.Context, log *slog.Logger, args []string) error {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if bandwidth != "" {
			if set["rate"] {
				return cli.Usagef("--rate and --bandwidth exclude each other (zmap derives its rate from the bandwidth)")
			}
			rate.pps = 0
		}
		if shard >= shards {
			return cli.Usagef("--shard %d of --shards %d: want 0 <= shard < shards (shards are numbered from 0)", shard, shards)
		}
		if vf.ID == "" {
			return cli.Usagef("--vantage is empty")
		}
		if week == "" {
			week = weekFromRunKey()
		}
		targets, tb, err := tf.prefixes(args)
		if err != nil {
			return err
		}
		if len(targets) == 0 && tb == nil && !tf.internetWide {
			return cli.Usagef("%v", probe.ErrNoTargets)
		}
		q, d, qp, dp, err := pf.payloads()
		if err != nil {
			return err
		}
		var seedP *uint64
		if set["seed"] {
			seedP = &seed
		}
		if shards > 1 && seedP == nil {
			return cli.Usagef("--shards %d needs one --seed shared by every shard", shards)
		}
		// Which zmap, before anything else: an unknown version stops here (exit 5).
		zv, err := probe.DetectZmap(ctx, zmapBin)
		if err != nil {
			return classify(err)
		}
		// Before anything is sent (the route discovery below pokes the next hop): lab
		// targets only from inside the testbed.
		s, safety, err := tf.openSafe(ctx, log, targets, tb)
		if err != nil {
			return err
		}
		defer s.Close()
		z := probe.ZmapRun{Binary: zmapBin, Rate: rate.pps, Bandwidth: bandwidth, Interface: iface, GatewayMAC: gw, SourceIP: src,
			Cooldown: cooldown, ProbesPerHost: probesPer, SenderThreads: threads}
		if err := discoverRoute(ctx, log, &z, targets, tb); err != nil {
			return err
		}
		sum, err := probe.Scan(ctx, probe.ScanConfig{Store: s, Log: log, VantageID: vf.ID, VantageLocation: vf.Location, VantageContact: vf.Contact, Label: label, Week: week,
			Shard: shard, Shards: shards, Seed: seedP, QUICPorts: qp, DNSPorts: dp, QUIC: q, DNS: d, Targets: targets,
			Testbed: tb, InternetWide: tf.internetWide, BlocklistDir: tf.blocklistDir, Safety: safety, OutDir: out, Zmap: z,
			FlushEvery: time.Second, DBWait: dbWait, ZmapVersion: &zv, Rescan: rescan, Confirmed: yes,
			OnEstimate: func(e probe.ScanEstimate) { fmt.Fprintf(os.Stderr, "zprobe: %s: %s\n", zv.Raw, e) }})
		return classify(errors.Join(err, output(ctx, s, sum, asJSON, log)))
	}
}

// discoverRoute fills what z leaves unset of the interface, gateway MAC and source
// address from the route to the testbed, the first target, or (internet-wide) 1.1.1.1.
func discoverRoute(ctx context.Context, log *slog.Logger, z *probe.ZmapRun, targets []netip.Prefix, tb *netip.Prefix) error {
	if z.Interface != "" && z.GatewayMAC != "" {
		return nil
	}
	dst := netip.MustParseAddr("1.1.1.1") // only the route is looked up; no packet goes there
	if tb != nil {
		dst = tb.Addr()
	} else if len(targets) > 0 {
		dst = targets[0].Addr()
	}
	r, err := probe.DiscoverRoute(ctx, dst)
	if err != nil {
		return cli.Environmentf("find the interface and gateway MAC (pass --interface and --gateway-mac): %v", err)
	}
	log.Info("route discovered", "interface", r.Interface, "source", r.SourceIP, "gateway", r.Gateway, "gateway_mac", r.GatewayMAC)
	if z.Interface == "" {
		z.Interface = r.Interface
	}
	if z.GatewayMAC == "" {
		z.GatewayMAC = r.GatewayMAC
	}
	if z.SourceIP == "" {
		z.SourceIP = r.SourceIP
	}
	return nil
}

// classify gives the errors of internal/probe their exit codes (by type).
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, probe.ErrNoTargets), errors.Is(err, probe.ErrBadTargets), errors.Is(err, probe.ErrOutsideAllowlist),
		errors.Is(err, probe.ErrSeedShards), errors.Is(err, probe.ErrBadShard), errors.Is(err, probe.ErrBadRate),
		errors.Is(err, pace.ErrPace), errors.Is(err, probe.ErrNeedsConfirmation):
		return &cli.ExitError{Code: cli.ExitUsage, Err: err}
	case errors.Is(err, probe.ErrNoZmap), errors.Is(err, probe.ErrZmapVersion):
		return &cli.ExitError{Code: cli.ExitEnvironment, Err: err}
	}
	return err
}

// rateFlag is --rate: packets per second, 1..probe.MaxRate, or "max" (probe.RateUnlimited,
// zmap -r 0). 0 is refused: zmap reads -r 0 as "no limit", which must never happen by
// accident; so is a rate that zmap's 32-bit integer would wrap (2^32 reached zmap as 0).
type rateFlag struct{ pps int }

func (r *rateFlag) String() string {
	if r == nil {
		return ""
	}
	if r.pps == probe.RateUnlimited {
		return "max"
	}
	return strconv.Itoa(r.pps)
}

func (r *rateFlag) Set(s string) error {
	if s == "max" {
		r.pps = probe.RateUnlimited
		return nil
	}
	if s == "0" {
		return errors.New("0 would be zmap's \"no limit\"; give a rate in packets per second, or \"max\" to send as fast as zmap can")
	}
	n, err := cli.ParseInt(s, 1, probe.MaxRate)
	if err != nil {
		return fmt.Errorf("want packets per second or \"max\": %w", err)
	}
	r.pps = int(n)
	return nil
}

// output prints what a scan or send did (sum nil: nothing): with asJSON one JSON object
// per reply the scan holds, else the summary; the summary is logged either way.
func output(ctx context.Context, s *store.Store, sum *probe.Summary, asJSON bool, log *slog.Logger) error {
	if sum == nil {
		return nil
	}
	sum.Log(log)
	if !asJSON {
		probe.PrintSummary(os.Stdout, sum)
		return nil
	}
	_, err := probe.WriteReplies(context.WithoutCancel(ctx), s, sum.ScanID, os.Stdout)
	return err
}

func weekFromRunKey() string {
	k := os.Getenv("DOQSCAN_RUN_KEY")
	if runkey.IsWeek(k) {
		return k
	}
	return ""
}
