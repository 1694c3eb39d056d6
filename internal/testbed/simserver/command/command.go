// Package command is cmd/simserver's subcommands (serve, population, check, pki, geodb):
// Tool binds each one's flags and calls the testbed packages (simserver, population,
// pki, geodb).
package command

import (
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/testbed/geodb"
)

// Tool is simserver. serve is the default when the arguments are flags only ("simserver
// --population FILE" is what testnet up runs); with no argument at all simserver asks
// for a subcommand, since serving binds every address of the namespace it runs in.
func Tool() *cli.Tool {
	return &cli.Tool{Command: Cmd, Default: "serve", Subcommands: []cli.Subcommand{
		{Name: "population",
			Summary: "print the population file generated from a seed",
			Usage:   "simserver population [--seed N] [--out FILE]",
			Examples: []string{
				"simserver population --seed 1 --out testbed/population.txt   # regenerate the committed file",
				"simserver population --seed 7 | grep class=doq-retry",
			},
			Flags: populationFlags},
		{Name: "serve",
			Summary: "answer for every address of the population: QUIC/DoQ (UDP 784, 853, 8853), DoH3 (UDP 443), DNS (53), DoT (853), DoH (TCP 443)",
			Usage:   "simserver [serve] --population FILE [--listen ADDR] [--ready-file FILE]",
			Examples: []string{
				"simserver serve --population testbed/population.txt --ready-file /tmp/ready --log-level debug",
			},
			Notes: `testnet up runs "simserver --population FILE" in the instance's internet namespace.
Readiness: once every listener is bound, simserver writes "ready\n" to the file
descriptor named by DOQSCAN_READY_FD (the testbed's contract) and/or creates --ready-file.
It runs until SIGINT/SIGTERM.`,
			Flags: serveFlags},
		{Name: "check",
			Summary: "parse a population file and print its classes with address counts, or all of it as JSON",
			Usage:   "simserver check [--population FILE] [--json]",
			Examples: []string{
				"simserver check --population testbed/population.txt",
				"simserver check --json | jq '.records[] | select(.peer != \"\") | .prefix'   # the parsed file, as the Python tests read it",
			},
			Flags: checkFlags},
		{Name: "pki",
			Summary:  "write the population's certificates (chain, leaf first) and keys as PEM, plus the CA roots",
			Usage:    "simserver pki --out DIR [--population FILE]",
			Examples: []string{"simserver pki --out var/pki   # then: var/pki/provider-b.crt, provider-b.key, roots.crt"},
			Notes:    "The keys are derived from the population's seed: identical on every run, for the testbed only.",
			Flags:    pkiFlags},
		{Name: "geodb",
			Summary: "write MaxMind-format City and ASN databases for the population's addresses (sites and ASNs)",
			Usage:   "simserver geodb --out DIR [--population FILE] [--build-time RFC3339]",
			Examples: []string{
				"simserver geodb --out var/geoip   # then: verify --geoip-city var/geoip/" + geodb.CityFile + " --geoip-asn var/geoip/" + geodb.ASNFile,
				"simserver geodb --out /tmp/g --build-time 2026-11-01T00:00:00Z",
			},
			Notes: "The files depend only on the population and the build time (default: the population file's modification time), so the same inputs give byte-identical files.",
			Flags: geodbFlags},
	}}
}

// Cmd is simserver's help.
var Cmd = cli.Command{
	Name:    "simserver",
	Summary: "the testbed's multi-tenant DNS/DoQ server and population tools",
	Usage:   "simserver [serve] [flags] | simserver population|check|pki|geodb [flags]",
}
