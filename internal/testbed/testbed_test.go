package testbed

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

func TestComplement(t *testing.T) {
	ps := complement(netns.TestbedPrefix)
	// Every address is either in the testbed or in exactly one blocklist prefix.
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		v := r.Uint32()
		if i < 4 {
			v = []uint32{0, 0xffffffff, 198<<24 | 18<<16, 198<<24 | 20<<16}[i]
		}
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		n := 0
		for _, p := range ps {
			if p.Contains(a) {
				n++
			}
		}
		if in := netns.TestbedPrefix.Contains(a); (in && n != 0) || (!in && n != 1) {
			t.Fatalf("%v: in testbed %v, covered by %d blocklist prefixes", a, in, n)
		}
	}
}

// TestMissingPeersNote: testnet up says which third-party peers the population names are
// not installed, that their addresses stay silent, and how to install them; nothing when
// they are installed or the population names none.
func TestMissingPeersNote(t *testing.T) {
	pop, err := population.LoadDefault()
	if err != nil {
		t.Skipf("SKIP: no population file: %v", err)
	}
	empty := t.TempDir() // a home with no peer installed
	note := MissingPeersNote(empty, pop)
	for _, want := range []string{"coredns", "hickory", "dnsproxy", "stay silent", "./dev install"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	noPeers := &population.Population{}
	if n := MissingPeersNote(empty, noPeers); n != "" {
		t.Errorf("population without peers: note %q", n)
	}
}
