package command

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/testbed/geodb"
	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

func runPKI(args []string) int {
	cmd := cli.Command{
		Name:     "simserver pki",
		Summary:  "write the population's certificates (chain, leaf first) and keys as PEM, plus the CA roots",
		Usage:    "simserver pki --out DIR [--population FILE]",
		Examples: []string{"simserver pki --out var/pki   # then: var/pki/provider-b.crt, provider-b.key, roots.crt"},
		Notes:    "The keys are derived from the population's seed: identical on every run, for the testbed only.",
	}
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	file := fs.String("population", population.DefaultPath(), "population file")
	out := fs.String("out", home.Path("var", "pki"), "output directory")
	return cli.RunMain(fs, &common, args, os.Stderr, func(ctx context.Context, log *slog.Logger, _ []string) error {
		p, err := population.Load(*file)
		if err != nil {
			return cli.Environmentf("%v", err)
		}
		k, err := pki.New(p)
		if err != nil {
			return err
		}
		if err := k.WriteDir(*out); err != nil {
			return err
		}
		for _, n := range k.Names() {
			log.Info("certificate", "name", n, "chain_bytes", k.ChainBytes(n), "file", *out+"/"+n+".crt")
		}
		return nil
	})
}

func runGeoDB(args []string) int {
	cmd := cli.Command{
		Name:    "simserver geodb",
		Summary: "write MaxMind-format City and ASN databases for the population's addresses (sites and ASNs)",
		Usage:   "simserver geodb --out DIR [--population FILE] [--build-time RFC3339]",
		Examples: []string{
			"simserver geodb --out var/geoip   # then: verify --geoip-city var/geoip/" + geodb.CityFile + " --geoip-asn var/geoip/" + geodb.ASNFile,
			"simserver geodb --out /tmp/g --build-time 2026-11-01T00:00:00Z",
		},
		Notes: "The files depend only on the population and the build time (default: the population file's modification time), so the same inputs give byte-identical files.",
	}
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	file := fs.String("population", population.DefaultPath(), "population file")
	out := fs.String("out", home.Path("var", "geoip"), "output directory")
	bt := fs.String("build-time", "", "database build time, RFC 3339 (default: the population file's mtime)")
	return cli.RunMain(fs, &common, args, os.Stderr, func(ctx context.Context, log *slog.Logger, _ []string) error {
		p, err := population.Load(*file)
		if err != nil {
			return cli.Environmentf("%v", err)
		}
		var when time.Time
		if *bt != "" {
			if when, err = time.Parse(time.RFC3339, *bt); err != nil {
				return cli.Usagef("--build-time: %v", err)
			}
		} else {
			st, err := os.Stat(*file)
			if err != nil {
				return cli.Environmentf("%v", err)
			}
			when = st.ModTime().UTC().Truncate(time.Second)
		}
		f, err := geodb.Write(p, *out, when)
		if err != nil {
			return err
		}
		log.Info("geoip databases written", "city", f.City, "asn", f.ASN, "build_time", when.Format(time.RFC3339))
		return nil
	})
}
