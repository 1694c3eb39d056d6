// Package e2e holds the verifier's end-to-end tests on the simulated internet: they run
// inside the testbed's vantage namespace (TestMain brings an instance of their own up
// and down) and check every QUIC endpoint of the population against its ground truth.
// As root they run in `./dev test`; without root, ip or /dev/net/tun every test skips
// with the reason.
package e2e
