// Command simserver is the testbed's multi-tenant server: one process answering for every
// address of the simulated internet with the behaviour testbed/population.txt assigns
// (internal/testbed/simquic for QUIC/DoQ, internal/testbed/simdns for DNS/DoT/DoH). It also
// generates the population file, the testbed PKI and GeoIP databases. The subcommands
// and their flags live in internal/testbed/simserver/command.
package main

import "github.com/doqscan/doqscan/internal/testbed/simserver/command"

func main() { command.Tool().Main() }
