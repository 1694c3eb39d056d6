// Command simserver is the testbed's multi-tenant server: one process answering for every
// address of the simulated internet with the behaviour testbed/population.txt assigns
// (internal/testbed/simquic for QUIC/DoQ, internal/testbed/simdns for DNS/DoT/DoH). It also
// generates the population file and the testbed PKI. Logic lives in internal/; this main
// only parses flags.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/geodb"
	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/simserver"
)

var subcommands = []struct {
	name, summary string
	run           func(args []string) int
}{
	{"population", "print the population file a seed generates", runPopulation},
	{"serve", "serve the population (the default when the first argument is a flag)", runServe},
	{"check", "parse a population file and print a summary of its classes", runCheck},
	{"pki", "write the testbed certificates and keys as PEM files (for peers)", runPKI},
	{"geodb", "write the population's GeoIP City and ASN mmdb files", runGeoDB},
}

func usage() {
	fmt.Fprintf(os.Stderr, "simserver: the testbed's multi-tenant DNS/DoQ server and population tools\n\nUsage:\n  simserver <command> [flags]\n\nCommands:\n")
	for _, s := range subcommands {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", s.name, s.summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun simserver <command> --help for its flags and examples.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(cli.ExitUsage)
	}
	for _, s := range subcommands {
		if s.name == os.Args[1] {
			os.Exit(s.run(os.Args[2:]))
		}
	}
	if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		os.Exit(cli.ExitOK)
	}
	if strings.HasPrefix(os.Args[1], "-") { // `simserver --population FILE`: what testnet up runs
		os.Exit(runServe(os.Args[1:]))
	}
	fmt.Fprintf(os.Stderr, "simserver: unknown command %q\n", os.Args[1])
	usage()
	os.Exit(cli.ExitUsage)
}

func runPopulation(args []string) int {
	cmd := cli.Command{
		Name:    "simserver population",
		Summary: "print the population file generated from a seed",
		Usage:   "simserver population [--seed N] [--out FILE]",
		Examples: []string{
			"simserver population --seed 1 --out testbed/population.txt   # regenerate the committed file",
			"simserver population --seed 7 | grep class=doq-retry",
		},
	}
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	seed := fs.Uint64("seed", population.DefaultSeed, "generator seed")
	out := fs.String("out", "", "write to FILE instead of stdout")
	return cli.RunMain(fs, &common, args, os.Stderr, func(ctx context.Context, log *slog.Logger, _ []string) error {
		data := population.Generate(*seed)
		if _, err := population.Parse(bytesReader(data)); err != nil {
			return fmt.Errorf("generated population does not parse: %w", err)
		}
		if *out == "" {
			_, err := os.Stdout.Write(data)
			return err
		}
		if err := os.WriteFile(*out, data, 0o644); err != nil {
			return err
		}
		log.Info("population written", "file", *out, "seed", *seed, "bytes", len(data))
		return nil
	})
}

func runCheck(args []string) int {
	cmd := cli.Command{
		Name:     "simserver check",
		Summary:  "parse a population file and print its classes with address counts",
		Usage:    "simserver check [--population FILE]",
		Examples: []string{"simserver check --population testbed/population.txt"},
	}
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	file := fs.String("population", population.DefaultFile, "population file")
	return cli.RunMain(fs, &common, args, os.Stderr, func(ctx context.Context, log *slog.Logger, _ []string) error {
		p, err := population.Load(*file)
		if err != nil {
			return cli.Environmentf("%v", err)
		}
		total := 0
		for _, c := range p.Classes() {
			n := 0
			for _, r := range p.ByClass(c) {
				n += r.Size()
			}
			total += n
			fmt.Printf("%-24s %6d\n", c, n)
		}
		fmt.Printf("%-24s %6d\n%-24s %6d\n", "listed", total, "quic endpoints", len(p.QUICEndpoints()))
		return nil
	})
}

func runServe(args []string) int {
	cmd := cli.Command{
		Name:    "simserver serve",
		Summary: "answer for every address of the population: QUIC/DoQ (UDP 784, 853, 8853), DoH3 (UDP 443), DNS (53), DoT (853), DoH (TCP 443)",
		Usage:   "simserver [serve] --population FILE [--listen ADDR] [--ready-file FILE]",
		Examples: []string{
			"ip netns exec dq-inet bin/simserver --population testbed/population.txt   # what testnet up runs",
			"simserver serve --population testbed/population.txt --ready-file /tmp/ready --log-level debug",
		},
		Notes: `Readiness: once every listener is bound, simserver writes "ready\n" to the file
descriptor named by DOQSCAN_READY_FD (the testbed's contract) and/or creates --ready-file.
It runs until SIGINT/SIGTERM.`,
	}
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	file := fs.String("population", population.DefaultFile, "population file")
	listen := fs.String("listen", "0.0.0.0", "address to bind (0.0.0.0: every address of the namespace)")
	ready := fs.String("ready-file", "", "create this file once every listener is bound")
	noQUIC := fs.Bool("no-quic", false, "do not start the QUIC/DoQ side")
	noDNS := fs.Bool("no-dns", false, "do not start the DNS/DoT/DoH side")
	return cli.RunMain(fs, &common, args, os.Stderr, func(ctx context.Context, log *slog.Logger, _ []string) error {
		p, err := population.Load(*file)
		if err != nil {
			return cli.Environmentf("%v", err)
		}
		addr, err := netip.ParseAddr(*listen)
		if err != nil {
			return cli.Usagef("--listen: %v", err)
		}
		s, err := simserver.Start(ctx, simserver.Config{Population: p, Listen: addr, NoQUIC: *noQUIC, NoDNS: *noDNS, Logger: log})
		if err != nil {
			return err
		}
		if err := testbed.SignalReady(); err != nil {
			return err
		}
		if *ready != "" {
			if err := os.WriteFile(*ready, []byte("ready\n"), 0o644); err != nil {
				return err
			}
		}
		transports := 0
		if s.QUIC != nil {
			transports = s.QUIC.Transports()
		}
		log.Info("simserver ready", "population", *file, "records", len(p.Records), "listen", addr, "quic_transports", transports)
		return s.Wait()
	})
}

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
	file := fs.String("population", population.DefaultFile, "population file")
	out := fs.String("out", "var/pki", "output directory")
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
	file := fs.String("population", population.DefaultFile, "population file")
	out := fs.String("out", "var/geoip", "output directory")
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
