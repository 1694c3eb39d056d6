// Package runkey names the periods doqscan's runs belong to: the ISO 8601 week of the
// weekly scan and verification ("2026-W47", as scans.iso_week and job_runs.run_key store
// it) and the UTC hour of the hourly measurement ("2026-11-22T04").
package runkey

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// HourLayout is the time layout of an hourly key.
const HourLayout = "2006-01-02T15"

var weekRE = regexp.MustCompile(`^([0-9]{4})-W(0[1-9]|[1-4][0-9]|5[0-3])$`)

// Week returns the ISO week of t (in UTC) as "YYYY-Www".
func Week(t time.Time) string {
	y, w := t.UTC().ISOWeek()
	return fmt.Sprintf("%04d-W%02d", y, w)
}

// Hour returns the UTC hour of t as "YYYY-MM-DDTHH".
func Hour(t time.Time) string { return t.UTC().Truncate(time.Hour).Format(HourLayout) }

// IsWeek says whether s is a well-formed week key.
func IsWeek(s string) bool { return weekRE.MatchString(s) }

// WeekStart returns Monday 00:00 UTC of the ISO week s names.
func WeekStart(s string) (time.Time, error) {
	m := weekRE.FindStringSubmatch(s)
	if m == nil {
		return time.Time{}, fmt.Errorf("run key %q is not an ISO week (YYYY-Www)", s)
	}
	y, _ := strconv.Atoi(m[1]) // the pattern guarantees digits
	w, _ := strconv.Atoi(m[2])
	// January 4th is always in week 1; go back to its Monday, then forward.
	jan4 := time.Date(y, 1, 4, 0, 0, 0, 0, time.UTC)
	monday := jan4.AddDate(0, 0, -((int(jan4.Weekday()) + 6) % 7))
	start := monday.AddDate(0, 0, 7*(w-1))
	if Week(start) != s { // week 53 of a year that has 52
		return time.Time{}, fmt.Errorf("run key %q: %d has no week %d", s, y, w)
	}
	return start, nil
}

// HourStart returns the hour an hourly key names.
func HourStart(s string) (time.Time, error) {
	t, err := time.Parse(HourLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("run key %q is not an hour (YYYY-MM-DDTHH): %w", s, err)
	}
	return t, nil
}
