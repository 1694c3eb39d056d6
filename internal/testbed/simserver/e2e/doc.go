// Package e2e holds simserver's end-to-end tests: bin/simserver serving the population
// behind the testbed's delay line, reached from the vantage namespace (TestMain brings a
// testbed of its own up and down). Without root, ip or /dev/net/tun every test skips
// with the reason.
package e2e
