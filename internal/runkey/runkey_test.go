package runkey

import (
	"testing"
	"time"
)

func TestWeek(t *testing.T) {
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), "2026-W48"},
		{time.Date(2021, 1, 3, 23, 0, 0, 0, time.UTC), "2020-W53"}, // Sunday of 2020's last week
		{time.Date(2024, 12, 30, 0, 0, 0, 0, time.UTC), "2025-W01"},
		{time.Date(2021, 2, 24, 0, 0, 0, 0, time.UTC), "2021-W08"},
		{time.Date(2026, 11, 23, 0, 30, 0, 0, time.FixedZone("UTC+2", 7200)), "2026-W47"}, // Sunday 22:30 UTC
	} {
		if got := Week(c.t); got != c.want {
			t.Errorf("Week(%v) = %q, want %q", c.t, got, c.want)
		}
		start, err := WeekStart(c.want)
		if err != nil || start.Weekday() != time.Monday || Week(start) != c.want || Week(start.Add(-time.Second)) == c.want {
			t.Errorf("WeekStart(%q) = %v, %v", c.want, start, err)
		}
	}
	for _, bad := range []string{"", "2026-W00", "2026-W54", "2026W47", "2026-W7", "2026-11-22T04", "2025-W53"} {
		if _, err := WeekStart(bad); err == nil {
			t.Errorf("WeekStart(%q) accepted", bad)
		}
	}
	if !IsWeek("2026-W47") || IsWeek("2026-11-22T04") {
		t.Error("IsWeek")
	}
}

func TestHour(t *testing.T) {
	tm := time.Date(2026, 11, 22, 4, 59, 59, 0, time.FixedZone("x", -3600))
	if got := Hour(tm); got != "2026-11-22T05" {
		t.Errorf("Hour = %q", got)
	}
	h, err := HourStart("2026-11-22T05")
	if err != nil || !h.Equal(time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)) {
		t.Errorf("HourStart = %v, %v", h, err)
	}
	if _, err := HourStart("2026-W47"); err == nil {
		t.Error("HourStart accepted a week")
	}
}
