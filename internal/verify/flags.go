package verify

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/certs"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/quicver"
)

// Flags binds the verify command's flags to a RunConfig (the flags' defaults are the
// run's) and keeps the ones that need parsing as given; Resolve turns them into the
// RunConfig, Command runs it.
type Flags struct {
	Config  RunConfig
	Vantage cli.VantageFlags
	Output  cli.OutputFlags // --json, --no-store

	fs                            *flag.FlagSet
	scanID                        int64
	ports, alpns, versions, names string
	roots                         string
	identify, ddr                 bool
}

var weekRE = regexp.MustCompile(`^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$`)

// Register binds f to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	f.fs = fs
	cfg := &f.Config
	cli.Int64Var(fs, &f.scanID, "scan-id", 0, 0, math.MaxInt64, "verify this scan's QUIC hosts (default: the latest scan)")
	fs.StringVar(&cfg.Scan.Week, "week", "", "verify the QUIC hosts of this ISO week's scans (YYYY-Www, all shards); also names the run (default: $DOQSCAN_RUN_KEY under jobrun, else the latest scan)")
	fs.StringVar(&cfg.Scan.Label, "scan-label", "weekly", "label of the scans to take (with --week or the latest)")
	fs.StringVar(&cfg.Scan.Vantage, "scan-vantage", "", "vantage point of the scans to take (default: --vantage, this one's own; '*': every vantage point's, the shards of a scan split over machines)")
	fs.StringVar(&cfg.TargetsFile, "targets", "", "verify the targets in this file instead of a scan (- = stdin)")
	f.Vantage.Register(fs)
	fs.StringVar(&cfg.Label, "label", "weekly", "run label (run identity: ISO week + vantage + label)")
	fs.StringVar(&f.ports, "ports", "784,853,8853", "ports whose QUIC replies are verified (scan targets)")
	fs.StringVar(&f.alpns, "alpns", strings.Join(doq.ALPNs(), ","), "DoQ ALPNs offered, highest first")
	fs.StringVar(&f.versions, "quic-versions", "v1,v2", "QUIC versions offered (quic-go supports v1 and v2)")
	fs.StringVar(&f.names, "sni-names", "", "server names to retry with when a host seems to require SNI (comma-separated)")
	cli.IntVar(fs, &cfg.Verify.MaxSNIAttempts, "max-sni-attempts", DefaultMaxSNIAttempts, 1, MaxSNIAttemptsCap, "retries with server names per target")
	fs.StringVar(&cfg.Verify.QueryName, "query-name", dnsmsg.DefaultQueryName, "name of the A query (RD set) sent over DoQ")
	cli.DurationVar(fs, &cfg.Verify.HandshakeTimeout, "handshake-timeout", DefaultHandshakeTimeout, MinTimeout, MaxTimeout, "QUIC+TLS handshake timeout per attempt (the study: 2s)")
	cli.DurationVar(fs, &cfg.Verify.QueryTimeout, "query-timeout", DefaultQueryTimeout, MinTimeout, MaxTimeout, "DNS exchange timeout after the handshake")
	cli.DurationVar(fs, &cfg.Verify.TargetTimeout, "target-timeout", DefaultTargetTimeout, MinTimeout, MaxTimeout, "overall deadline per target, retries included")
	fs.StringVar(&f.roots, "roots", "", "PEM root certificates for cert_valid_for_sni (default: the system pool)")
	cli.IntVar(fs, &cfg.Concurrency, "concurrency", DefaultConcurrency, 1, MaxConcurrency, "targets verified in parallel")
	cli.FloatVar(fs, &cfg.Rate, "rate", 0, 0, MaxRate, "new targets per second (0 = no limit)")
	fs.StringVar(&cfg.CityDB, "geoip-city", "", "MaxMind City mmdb (with --geoip-asn) for resolver_geo")
	fs.StringVar(&cfg.ASNDB, "geoip-asn", "", "MaxMind ASN mmdb (with --geoip-city)")
	cli.IntVar(fs, &cfg.BatchSize, "batch", DefaultBatchSize, 1, MaxBatchSize, "results per database write")
	cli.DurationVar(fs, &cfg.Progress, "progress", DefaultProgress, MinProgress, MaxProgress, "progress log interval")
	fs.BoolVar(&f.ddr, "ddr", true, "ask every DNS/53 responder of the scan for its designated resolvers (_dns.resolver.arpa SVCB, RFC 9462) and verify the designated DoQ endpoints on any port")
	fs.StringVar(&cfg.DDRTargetsFile, "ddr-targets", "", "also ask the DNS resolvers in this file (addr per line) for their designated resolvers")
	fs.BoolVar(&f.identify, "identify", true, "identify each QUIC server's library (quic_stacks): its handshake's qlog and one handshake offering an unknown ALPN")
	fs.BoolVar(&cfg.RetryTimeouts, "retry-timeouts", true, "verify timed-out targets once more after the others, at 1/8 of the concurrency")
	f.Output.Register(fs, "target")
	fs.BoolVar(&cfg.Rerun, "rerun", false, "verify a run the database holds again, as a new attempt under the label LABEL-r2, -r3, ... (without it, a run started again verifies only the targets it lacks)")
	fs.StringVar(&cfg.BlocklistDir, "blocklist-dir", cli.DefaultBlocklistDir(), "blocklist *.conf files (must exist); their ranges, opt-outs and reserved ranges are never contacted")
}

// Resolve checks the parsed flags and returns the run they ask for: usage errors (exit
// code 2) name the flag, a missing file a flag names is a missing prerequisite (5).
// Under jobrun's weekly job ($DOQSCAN_RUN_KEY a week, no --week, --scan-id or
// --targets), the run verifies the scans of that week (every shard).
func (f *Flags) Resolve() (RunConfig, error) {
	cfg := f.Config
	cfg.Ports, cfg.Verify.Versions = nil, nil
	cfg.Vantage, cfg.VantageLocation, cfg.VantageContact = f.Vantage.ID, f.Vantage.Location, f.Vantage.Contact
	set := map[string]bool{}
	if f.fs != nil {
		f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	}
	if set["scan-id"] {
		if f.scanID <= 0 {
			return cfg, cli.Usagef("--scan-id must be positive")
		}
		id := f.scanID
		cfg.Scan.ScanID = &id
	}
	if k := os.Getenv("DOQSCAN_RUN_KEY"); !set["week"] && !set["scan-id"] && cfg.TargetsFile == "" && weekRE.MatchString(k) {
		cfg.Scan.Week = k
	}
	if cfg.Scan.Week != "" {
		if !weekRE.MatchString(cfg.Scan.Week) {
			return cfg, cli.Usagef("--week %q: want YYYY-Www", cfg.Scan.Week)
		}
		cfg.Week = cfg.Scan.Week
	}
	if set["scan-id"] && (cfg.Scan.Week != "" || cfg.TargetsFile != "") {
		return cfg, cli.Usagef("--scan-id excludes --week and --targets (with --targets, --week only names the run)")
	}
	for _, p := range cli.SplitList(f.ports) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return cfg, cli.Usagef("--ports: bad port %q", p)
		}
		cfg.Ports = append(cfg.Ports, int32(n))
	}
	cfg.Verify.ALPNs = cli.SplitList(f.alpns)
	for _, v := range cli.SplitList(f.versions) {
		n, err := quicver.Parse(v)
		if err != nil || (n != quicver.V1 && n != quicver.V2) {
			return cfg, cli.Usagef("--quic-versions: %q unsupported (quic-go speaks v1 and v2)", v)
		}
		cfg.Verify.Versions = append(cfg.Verify.Versions, quic.Version(n))
	}
	cfg.Verify.SNINames = cli.SplitList(f.names)
	cfg.Verify.NoIdentify = f.fs != nil && !f.identify
	cfg.NoDDR = f.fs != nil && !f.ddr
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	if err := cli.CheckBlocklistDir("blocklist-dir", cfg.BlocklistDir); err != nil {
		return cfg, err
	}
	for _, p := range []string{cfg.CityDB, cfg.ASNDB, f.roots, cfg.DDRTargetsFile} {
		if p != "" {
			if _, err := os.Stat(p); err != nil {
				return cfg, cli.Environmentf("%v", err)
			}
		}
	}
	pool, err := certs.LoadPool(f.roots)
	if err != nil {
		return cfg, cli.Environmentf("%v", err)
	}
	cfg.Verify.Roots = pool
	return cfg, nil
}

// Command is the verify command: it refuses arguments after the flags, resolves the
// flags, reads the targets file, opens the store (unless --no-store) and runs the
// verification. Every target's result goes to stdout as it is made: one JSON object a
// line with --json; else a table, when stdout is a terminal or with --no-store. The
// summary follows the table (or stands alone), or with --json goes to the log.
func Command(ctx context.Context, log *slog.Logger, f *Flags, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return cli.Usagef("unexpected arguments %q", args)
	}
	cfg, err := f.Resolve()
	if err != nil {
		return err
	}
	if f.Output.NoStore && cfg.TargetsFile == "" {
		return cli.Usagef("--no-store needs --targets (a scan's targets are in the database)")
	}
	if f.Output.NoStore && cfg.Rerun {
		return cli.Usagef("--rerun verifies a stored run again: it does not combine with --no-store")
	}
	// The targets file before the database: a missing or bad file is exit 5 or 2
	// whether or not a database answers.
	if cfg.TargetsFile != "" {
		if cfg.Targets, err = ReadTargetsFile(cfg.TargetsFile); err != nil {
			return fmt.Errorf("targets: %w", err)
		}
	}
	var pr *Printer
	if f.Output.JSON || f.Output.NoStore || cli.Terminal(stdout) {
		pr = NewPrinter(stdout, f.Output.JSON)
		cfg.OnResult = func(r Record) { _ = pr.Print(r) }
	}
	var sum *Summary
	if f.Output.NoStore {
		sum, err = RunLocal(ctx, cfg, log)
	} else {
		s, oerr := cli.OpenStore(ctx, log)
		if oerr != nil {
			return oerr
		}
		defer s.Close()
		sum, err = Run(ctx, s, cfg, log)
	}
	if pr != nil {
		_ = pr.Close()
	}
	if sum != nil {
		sum.Log(log)
		if !f.Output.JSON {
			if pr != nil {
				fmt.Fprintln(stdout)
			}
			sum.WriteText(stdout)
		}
	}
	return err
}
