// Package command is cmd/simserver's flag handling: one function per subcommand
// (serve, population, check, pki, geodb) that parses its flags and calls the testbed
// packages (simserver, population, pki, geodb).
package command

import (
	"fmt"
	"os"
	"strings"

	"github.com/doqscan/doqscan/internal/cli"
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

// Main runs simserver with args (os.Args[1:]) and returns its exit code.
func Main(args []string) int {
	if len(args) < 1 {
		usage()
		return cli.ExitUsage
	}
	for _, s := range subcommands {
		if s.name == args[0] {
			return s.run(args[1:])
		}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		return cli.ExitOK
	}
	if strings.HasPrefix(args[0], "-") { // `simserver --population FILE`: what testnet up runs
		return runServe(args)
	}
	fmt.Fprintf(os.Stderr, "simserver: unknown command %q\n", args[0])
	usage()
	return cli.ExitUsage
}
