package probe

import (
	"errors"
	"math"
	"net/netip"
	"testing"

	"github.com/doqscan/doqscan/internal/optout/pace"
)

// TestPacketsPerSecond: --bandwidth becomes packets per second as zmap computes it
// (frame of payload + Ethernet/IPv4/UDP headers + 24 bytes of wire overhead).
func TestPacketsPerSecond(t *testing.T) {
	for _, c := range []struct {
		z       ZmapRun
		payload int
		want    float64
	}{
		{ZmapRun{Rate: 10000}, 1252, 10000},
		{ZmapRun{Rate: RateUnlimited}, 1252, -1},
		{ZmapRun{Bandwidth: "1G"}, 34, 1e9 / (8 * (34 + 42 + 24))},
		{ZmapRun{Bandwidth: "500M"}, 1252, 500e6 / (8 * (1252 + 42 + 24))},
		{ZmapRun{Bandwidth: "9920"}, 58, 10},
	} {
		got, err := c.z.PacketsPerSecond(c.payload)
		if err != nil || math.Abs(got-c.want) > 1e-9*math.Max(1, c.want) {
			t.Errorf("%+v, %d bytes: %v, %v; want %v", c.z, c.payload, got, err, c.want)
		}
	}
	if _, err := (ZmapRun{Bandwidth: "lots"}).PacketsPerSecond(60); !errors.Is(err, ErrBadRate) {
		t.Errorf("bad bandwidth: %v", err)
	}
}

// TestCheckPace: a scan of one internet /16 at zmap's default rate breaks the page's
// per-/16 promise and is refused; internet-wide at the same rate, or the lab /16 at any
// rate, is not; a bandwidth is judged by the packet rate it gives the smallest probe.
func TestCheckPace(t *testing.T) {
	one16 := []netip.Prefix{netip.MustParsePrefix("44.1.0.0/16")}
	lab := netip.MustParsePrefix("198.19.0.0/16")
	safe := func(targets []netip.Prefix, tb *netip.Prefix, wide bool) *Safety {
		s, err := BuildSafety(targets, tb, wide, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		name    string
		z       ZmapRun
		s       *Safety
		refused bool
	}{
		{"one internet /16 at 10k/s", ZmapRun{Rate: 10000}, safe(one16, nil, false), true},
		{"one internet /16 at 200/s", ZmapRun{Rate: 200}, safe(one16, nil, false), false},
		{"one internet /16 unlimited", ZmapRun{Rate: RateUnlimited}, safe(one16, nil, false), true},
		{"one internet /16 at 1M bit/s", ZmapRun{Bandwidth: "1M"}, safe(one16, nil, false), true},
		{"internet-wide at 10k/s", ZmapRun{Rate: 10000}, safe(nil, nil, true), false},
		{"internet-wide at 20G bit/s", ZmapRun{Bandwidth: "20G"}, safe(nil, nil, true), true},
		{"the lab /16 at 100k/s", ZmapRun{Rate: 100000}, safe([]netip.Prefix{lab}, &lab, false), false},
	} {
		err := checkPace(c.z, c.s, 34)
		if got := errors.Is(err, pace.ErrPace); got != c.refused {
			t.Errorf("%s: %v, refused=%v want %v", c.name, err, got, c.refused)
		}
	}
}
