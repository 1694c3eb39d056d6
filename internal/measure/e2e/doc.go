// Package e2e holds the measurement's end-to-end tests on the simulated internet: they
// run inside the testbed's vantage namespace (TestMain brings an instance of their own
// up and down) and take every expectation from the population file (round trips per
// handshake, path RTTs, hostile behaviours). As root they run in `./dev test`; without
// root, ip or /dev/net/tun every test skips with the reason.
package e2e
