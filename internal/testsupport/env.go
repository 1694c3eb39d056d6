package testsupport

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// EnvInts reads a benchmark's list of positive integers from environment variable name
// ("1,64": the concurrencies to run, say), or def when it is unset; a malformed value
// fails tb.
func EnvInts(tb testing.TB, name string, def ...int) []int {
	tb.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			tb.Fatalf("%s=%q: want positive integers separated by commas", name, s)
		}
		out = append(out, n)
	}
	return out
}
