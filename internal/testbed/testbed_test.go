package testbed

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/doqscan/doqscan/internal/testbed/netns"
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
