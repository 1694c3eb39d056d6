// Package e2e holds the measurement's end-to-end tests on the simulated internet (build
// tag testbed): they run inside the testbed's vantage namespace and take every
// expectation from the population file (round trips per handshake, path RTTs, hostile
// behaviours). Run them with `go test -tags testbed ./internal/measure/e2e/` as root.
package e2e
