// Package probetest holds helpers for the tests of the probe stage.
package probetest

import (
	"bufio"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// RawAddrs returns the addresses (first CSV column) of the data lines of a raw file; a
// line whose first column is no address (the header, a line cut short) is skipped.
func RawAddrs(t testing.TB, path string) map[netip.Addr]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[netip.Addr]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		field, _, _ := strings.Cut(sc.Text(), ",")
		if a, err := netip.ParseAddr(field); err == nil {
			out[a] = true
		}
	}
	return out
}
