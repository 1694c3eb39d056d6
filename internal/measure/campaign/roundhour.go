package campaign

import (
	"fmt"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/runkey"
)

// ParseRoundHour returns the hour a single round is for: flag (an hourly run key such as
// "2026-11-22T04", or an RFC 3339 time, truncated to the hour) if set, else runKey (the
// DOQSCAN_RUN_KEY that jobrun exports) if it is an hourly key, else the zero time (now).
// Several vantage points measuring the same hour thus share its key.
func ParseRoundHour(flag, runKey string) (time.Time, error) {
	if flag == "" {
		runKey = strings.TrimSpace(runKey)
		if runKey == "" || runkey.IsWeek(runKey) { // empty, or a weekly key: not ours
			return time.Time{}, nil
		}
		flag = runKey
	}
	if t, err := runkey.HourStart(flag); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339, flag); err == nil {
		return t.UTC().Truncate(time.Hour), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an hour key (2006-01-02T15) nor RFC 3339", flag)
}
