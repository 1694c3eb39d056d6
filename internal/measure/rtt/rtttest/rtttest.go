// Package rtttest holds what the RTT probe tests share: one Prober probing the test
// servers on IPv4 and IPv6 loopback, and the check of a probe's samples.
package rtttest

import (
	"testing"

	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/measure/rtt"
)

// EachLoopback runs f in a subtest for IPv4 and for IPv6 loopback, each with the test
// servers started on that address, and one Prober for both families (as measure uses it).
func EachLoopback(t *testing.T, f func(t *testing.T, p *rtt.Prober, s *measuretest.Servers, host string)) {
	p := rtt.New()
	defer p.Close()
	for _, host := range []string{"127.0.0.6", "::1"} {
		t.Run(host, func(t *testing.T) {
			f(t, p, measuretest.Start(t, measuretest.Config{Host: host}), host)
		})
	}
}

// Check fails the test unless got holds n samples, each with status want, and each
// answered one with a positive RTT.
func Check(t testing.TB, name string, got []rtt.Sample, want rtt.Status, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%s: %d samples, want %d", name, len(got), n)
	}
	for _, g := range got {
		if g.Status != want || (g.Answered() && g.RTT <= 0) {
			t.Errorf("%s: sample %+v, want %s", name, g, want)
		}
	}
}
