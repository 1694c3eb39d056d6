// Command simserver is the testbed's multi-tenant server: one process answering for every
// address of the simulated internet with the behaviour testbed/population.txt assigns
// (internal/testbed/simquic for QUIC/DoQ, internal/testbed/simdns for DNS/DoT/DoH). It also
// generates the population file, the testbed PKI and GeoIP databases. The flags live in
// internal/testbed/simserver/command.
package main

import (
	"os"

	"github.com/doqscan/doqscan/internal/testbed/simserver/command"
)

func main() { os.Exit(command.Main(os.Args[1:])) }
