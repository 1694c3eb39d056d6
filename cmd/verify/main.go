// Command verify tells which QUIC hosts of a scan speak DNS over QUIC (see
// docs/verify.md). Its logic lives in internal/verify; this main only parses flags.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/certs"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/verify"
)

var cmd = cli.Command{
	Name:    "verify",
	Summary: "verify which QUIC hosts of a scan are DoQ resolvers (ALPN, versions, DNS query, certificates, AS/location)",
	Usage:   "verify [flags]",
	Examples: []string{
		"verify                                   # the latest scan's QUIC hosts on 784/853/8853",
		"verify --week 2026-W47 --vantage dq-vantage --geoip-city GeoLite2-City.mmdb --geoip-asn GeoLite2-ASN.mmdb",
		"verify --scan-id 12 --concurrency 500 --rate 2000 --json > summary.json",
		"verify --targets hosts.txt --label adhoc  # addr, addr:port or [v6]:port per line",
		"verify --sni-names dns.example,doh.example --roots /etc/ssl/certs/ca-certificates.crt",
	},
	Notes: `Outcomes: doq-verified, doq-refused, doq-dns-error, quic-not-doq, version-mismatch,
sni-required, timeout, tls-error, protocol-error, unreachable, error (docs/verify.md says what each means).
Targets file: addr, addr:port or [v6]:port per line, '#' comments; a target listed twice is verified once.
A run is identified by ISO week + vantage + label; running it again resumes it (verified
targets are skipped, nothing is duplicated). Progress is logged every --progress.`,
}

var weekRE = regexp.MustCompile(`^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$`)

func main() {
	fs, common, run := command()
	cli.Main(fs, common, run)
}

// command binds the flags to verify.RunConfig and returns the run function (tests call
// it through cli.RunMain).
func command() (*flag.FlagSet, *cli.Common, func(context.Context, *slog.Logger, []string) error) {
	var (
		common                        cli.Common
		cfg                           verify.RunConfig
		scanID                        int64
		ports, alpns, versions, names string
		roots                         string
		jsonOut                       bool
		vf                            cli.VantageFlags
	)
	fs := cli.NewFlagSet(cmd, &common)
	fs.Int64Var(&scanID, "scan-id", 0, "verify this scan's QUIC hosts (default: the latest scan)")
	fs.StringVar(&cfg.Scan.Week, "week", "", "verify the QUIC hosts of this ISO week's scans (YYYY-Www, all shards); also names the run (default: $DOQSCAN_RUN_KEY under jobrun, else the latest scan)")
	fs.StringVar(&cfg.Scan.Label, "scan-label", "weekly", "label of the scans to take with --week")
	fs.StringVar(&cfg.TargetsFile, "targets", "", "verify the targets in this file instead of a scan (- = stdin)")
	vf.Register(fs)
	fs.StringVar(&cfg.Label, "label", "weekly", "run label (run identity: ISO week + vantage + label)")
	fs.StringVar(&ports, "ports", "784,853,8853", "ports whose QUIC replies are verified (scan targets)")
	fs.StringVar(&alpns, "alpns", strings.Join(doq.ALPNs(), ","), "DoQ ALPNs offered, highest first")
	fs.StringVar(&versions, "quic-versions", "v1,v2", "QUIC versions offered (quic-go supports v1 and v2)")
	fs.StringVar(&names, "sni-names", "", "server names to retry with when a host seems to require SNI (comma-separated)")
	fs.IntVar(&cfg.Verify.MaxSNIAttempts, "max-sni-attempts", verify.DefaultMaxSNIAttempts, "retries with server names per target, 1..16")
	fs.StringVar(&cfg.Verify.QueryName, "query-name", verify.DefaultQueryName, "name of the A query (RD set) sent over DoQ")
	fs.DurationVar(&cfg.Verify.HandshakeTimeout, "handshake-timeout", verify.DefaultHandshakeTimeout, "QUIC+TLS handshake timeout per attempt, 1ms..5m (the study: 2s)")
	fs.DurationVar(&cfg.Verify.QueryTimeout, "query-timeout", verify.DefaultQueryTimeout, "DNS exchange timeout after the handshake, 1ms..5m")
	fs.DurationVar(&cfg.Verify.TargetTimeout, "target-timeout", verify.DefaultTargetTimeout, "overall deadline per target, retries included, 1ms..5m")
	fs.StringVar(&roots, "roots", "", "PEM root certificates for cert_valid_for_sni (default: the system pool)")
	fs.IntVar(&cfg.Concurrency, "concurrency", verify.DefaultConcurrency, "targets verified in parallel, 1..10000")
	fs.Float64Var(&cfg.Rate, "rate", 0, "new targets per second, 0..1e6 (0 = no limit)")
	fs.StringVar(&cfg.CityDB, "geoip-city", "", "MaxMind City mmdb (with --geoip-asn) for resolver_geo")
	fs.StringVar(&cfg.ASNDB, "geoip-asn", "", "MaxMind ASN mmdb (with --geoip-city)")
	fs.IntVar(&cfg.BatchSize, "batch", verify.DefaultBatchSize, "results per database write, 1..100000")
	fs.DurationVar(&cfg.Progress, "progress", verify.DefaultProgress, "progress log interval, 100ms..1h")
	fs.BoolVar(&cfg.RetryTimeouts, "retry-timeouts", true, "verify timed-out targets once more after the others, at 1/8 of the concurrency")
	fs.BoolVar(&jsonOut, "json", false, "print the summary as JSON on stdout")
	fs.StringVar(&cfg.BlocklistDir, "blocklist-dir", cli.DefaultBlocklistDir(), "blocklist *.conf files (must exist); their ranges, opt-outs and reserved ranges are never contacted")
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		if len(args) > 0 {
			return cli.Usagef("unexpected arguments %q", args)
		}
		cfg.Vantage, cfg.VantageLocation, cfg.VantageContact = vf.ID, vf.Location, vf.Contact
		if err := parse(fs, &cfg, scanID, ports, alpns, versions, names, roots); err != nil {
			return err
		}
		s, err := cli.OpenStore(ctx, log)
		if err != nil {
			return err
		}
		defer s.Close()
		sum, err := verify.Run(ctx, s, cfg, log)
		if sum != nil {
			if jsonOut {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				_ = enc.Encode(sum)
			} else {
				sum.WriteText(os.Stdout)
			}
		}
		return err
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parse(fs *flag.FlagSet, cfg *verify.RunConfig, scanID int64, ports, alpns, versions, names, roots string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["scan-id"] {
		if scanID <= 0 {
			return cli.Usagef("--scan-id must be positive")
		}
		cfg.Scan.ScanID = &scanID
	}
	// Under jobrun's weekly job, verify the scans of the week being run (every shard).
	if k := os.Getenv("DOQSCAN_RUN_KEY"); !set["week"] && !set["scan-id"] && cfg.TargetsFile == "" && weekRE.MatchString(k) {
		cfg.Scan.Week = k
	}
	if cfg.Scan.Week != "" {
		if !weekRE.MatchString(cfg.Scan.Week) {
			return cli.Usagef("--week %q: want YYYY-Www", cfg.Scan.Week)
		}
		cfg.Week = cfg.Scan.Week
	}
	if set["scan-id"] && (cfg.Scan.Week != "" || cfg.TargetsFile != "") {
		return cli.Usagef("--scan-id excludes --week and --targets (with --targets, --week only names the run)")
	}
	for _, p := range splitList(ports) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return cli.Usagef("--ports: bad port %q", p)
		}
		cfg.Ports = append(cfg.Ports, int32(n))
	}
	cfg.Verify.ALPNs = splitList(alpns)
	for _, v := range splitList(versions) {
		n, err := quicver.Parse(v)
		if err != nil || (n != quicver.V1 && n != quicver.V2) {
			return cli.Usagef("--quic-versions: %q unsupported (quic-go speaks v1 and v2)", v)
		}
		cfg.Verify.Versions = append(cfg.Verify.Versions, quic.Version(n))
	}
	cfg.Verify.SNINames = splitList(names)
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := cli.CheckBlocklistDir("blocklist-dir", cfg.BlocklistDir); err != nil {
		return err
	}
	for _, p := range []string{cfg.CityDB, cfg.ASNDB, roots} {
		if p != "" {
			if _, err := os.Stat(p); err != nil {
				return cli.Environmentf("%v", err)
			}
		}
	}
	pool, err := certs.LoadPool(roots)
	if err != nil {
		return cli.Environmentf("%v", err)
	}
	cfg.Verify.Roots = pool
	return nil
}
