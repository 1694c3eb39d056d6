// Package e2e holds dnsbench's end-to-end tests on the simulated internet: they run
// inside the testbed's vantage namespace (TestMain brings an instance of their own up
// and down) and change the emulated paths through the delay line's control socket. As
// root they run in `./dev test`; without root, ip or /dev/net/tun every test skips with
// the reason.
package e2e
