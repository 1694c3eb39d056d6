// Command verify tells which QUIC hosts of a scan speak DNS over QUIC (see
// docs/verify.md). The flags bind to verify.Flags; the run lives in internal/verify.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/verify"
)

var cmd = cli.Command{
	Name:    "verify",
	Summary: "verify which QUIC hosts of a scan are DoQ resolvers (ALPN, versions, DNS query, certificates, AS/location)",
	Usage:   "verify [flags]",
	Locks:   "the verification run (week, vantage, label)",
	Examples: []string{
		"verify                                   # the latest scan's QUIC hosts on 784/853/8853",
		`verify --week "$(date -u +%G-W%V)" --vantage vp2 --scan-vantage dq --geoip-city var/geoip/GeoLite2-City.mmdb --geoip-asn var/geoip/GeoLite2-ASN.mmdb   # vp2 verifies dq's scan, with AS and location`,
		"verify --scan-id 12 --concurrency 500 --rate 2000 --json > results.jsonl   # one JSON object per target",
		"verify --targets hosts.txt --no-store     # no database: a table of the results (--json: JSON lines)",
		"verify --targets hosts.txt --label adhoc  # 198.19.0.7 (port 853), 198.19.0.7:784, [2001:2::7]:8853 per line",
		"verify --sni-names dns.example,doh.example --roots /etc/ssl/certs/ca-certificates.crt",
	},
	Notes: cli.TargetsHelp + `
Outcomes: doq-verified, doq-refused, doq-dns-error, quic-not-doq, doq-no-alpn, version-mismatch,
sni-required, timeout, tls-error, protocol-error, unreachable, error (docs/verify.md says what each means).
A run is identified by ISO week + vantage + label; running it again resumes it (verified
targets are skipped and the log and summary say so, nothing is duplicated); --rerun
verifies it all again as a new attempt (label LABEL-r2, -r3, ...). Progress is logged
every --progress.`,
}

func main() { cli.Main(command()) }

// command binds the flags to verify.Flags and returns the run function (tests call it
// through cli.RunMain).
func command() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	var f verify.Flags
	fs := cli.NewFlagSet(cmd, &common)
	f.Register(fs)
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		return verify.Command(ctx, log, &f, args, os.Stdout)
	}
}
