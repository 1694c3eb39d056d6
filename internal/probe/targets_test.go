package probe

import (
	"net/netip"
	"strings"
	"testing"
)

// TestReadPrefixes: a zmap allowlist/hitlist: CIDRs (masked), bare addresses (as host
// prefixes), comments and blank lines; a bad line is an error naming the file and line.
func TestReadPrefixes(t *testing.T) {
	in := "# testbed\n198.19.0.0/16\n\n  198.19.1.7   # one host\n198.19.3.9/24\n"
	got, err := ReadPrefixes(strings.NewReader(in), "targets.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16"), netip.MustParsePrefix("198.19.1.7/32"),
		netip.MustParsePrefix("198.19.3.0/24")}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	_, err = ReadPrefixes(strings.NewReader("198.19.0.0/16\nnot-a-prefix\n"), "targets.txt")
	if err == nil || !strings.Contains(err.Error(), "targets.txt:2") {
		t.Fatalf("bad line: %v, want an error at targets.txt:2", err)
	}
}
