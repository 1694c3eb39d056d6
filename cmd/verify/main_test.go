package main

import (
	"flag"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/verify"
)

func TestParseRejectsBadFlags(t *testing.T) {
	cases := []struct {
		name                          string
		args                          []string
		ports, alpns, versions, names string
		want                          int
	}{
		{"ok", nil, "853", "doq,doq-i00", "v1,v2", "a.test", cli.ExitOK},
		{"bad port", nil, "70000", "doq", "v1", "", cli.ExitUsage},
		{"not DoQ ALPN", nil, "853", "h3", "v1", "", cli.ExitUsage},
		{"draft QUIC version", nil, "853", "doq", "draft-29", "", cli.ExitUsage},
		{"IP as SNI name", nil, "853", "doq", "v1", "198.19.0.1", cli.ExitUsage},
		{"bad week", []string{"--week", "2026-47"}, "853", "doq", "v1", "", cli.ExitUsage},
		{"scan-id and targets", []string{"--scan-id", "3", "--targets", "x"}, "853", "doq", "v1", "", cli.ExitUsage},
		{"one geo db", []string{"--geoip-city", "x.mmdb"}, "853", "doq", "v1", "", cli.ExitUsage},
		{"missing roots", nil, "853", "doq", "v1", "", cli.ExitEnvironment},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cfg verify.RunConfig
			var scanID int64
			fs := flag.NewFlagSet("verify", flag.ContinueOnError)
			fs.Int64Var(&scanID, "scan-id", 0, "")
			fs.StringVar(&cfg.Scan.Week, "week", "", "")
			fs.StringVar(&cfg.TargetsFile, "targets", "", "")
			fs.StringVar(&cfg.CityDB, "geoip-city", "", "")
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			cfg.Concurrency, cfg.BatchSize = 1, 1
			cfg.Verify.HandshakeTimeout, cfg.Verify.QueryTimeout, cfg.Verify.TargetTimeout = 1, 1, 1
			roots := ""
			if c.name == "missing roots" {
				roots = "/nonexistent/roots.pem"
			}
			err := parse(fs, &cfg, scanID, c.ports, c.alpns, c.versions, c.names, roots)
			if got := cli.ExitCode(err); got != c.want {
				t.Fatalf("exit %d (%v), want %d", got, err, c.want)
			}
		})
	}
}
