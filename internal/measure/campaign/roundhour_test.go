package campaign

import (
	"testing"
	"time"
)

func TestParseRoundHour(t *testing.T) {
	h := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		flag, key string
		want      time.Time
		bad       bool
	}{
		{"", "", time.Time{}, false},
		{"", "2026-W47", time.Time{}, false}, // a weekly key is not a round hour
		{"", "2026-11-22T04", h, false},
		{"2026-11-22T04", "2026-11-22T09", h, false}, // the flag wins
		{"2026-11-22T04:37:10Z", "", h, false},
		{"2026-11-22T06:37:10+02:00", "", h, false},
		{"yesterday", "", time.Time{}, true},
		{"", "2026-11-22", time.Time{}, true},
	} {
		got, err := ParseRoundHour(c.flag, c.key)
		if (err != nil) != c.bad || !got.Equal(c.want) {
			t.Errorf("ParseRoundHour(%q, %q) = %v, %v; want %v, error %v", c.flag, c.key, got, err, c.want, c.bad)
		}
	}
}
