package testsupport

import (
	"os"
	"strings"
)

// LoadAverage is the 1, 5 and 15-minute load averages (/proc/loadavg), or "?": what
// benchmarks print beside their figures, since other work on the cores moves them.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
