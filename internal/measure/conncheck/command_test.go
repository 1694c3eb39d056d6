package conncheck

import (
	"flag"
	"testing"

	"github.com/doqscan/doqscan/internal/measure/rtt"
)

// TestFlagsRTTSamples: --rtt-samples reaches Settings.RTTSamples; its default is the
// hourly round's sample count and 0 means none (Settings' negative: the qlog's own RTT).
func TestFlagsRTTSamples(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, rtt.DefaultSamples},
		{[]string{"--rtt-samples", "0"}, -1},
		{[]string{"--rtt-samples", "7"}, 7},
	} {
		var f Flags
		fs := flag.NewFlagSet("conncheck", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse(append([]string{"--blocklist-dir", t.TempDir()}, tc.args...)); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		c, err := f.Resolve()
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if c.RTTSamples != tc.want {
			t.Errorf("%v: RTTSamples %d, want %d", tc.args, c.RTTSamples, tc.want)
		}
	}
}
