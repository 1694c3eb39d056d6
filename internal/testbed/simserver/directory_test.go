package simserver

import (
	"testing"

	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/simdns"
)

// Every record's DNS services appear in the simdns Directory with the class its rcode
// and hostile kind say, and nothing else does; DoT/DoH hosts have a certificate.
func TestDirectoryFollowsPopulation(t *testing.T) {
	pop, err := population.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	k, err := pki.New(pop)
	if err != nil {
		t.Fatal(err)
	}
	d, certs := Directory{pop}, Certs{pop, k}
	counts := map[simdns.Class]int{}
	for i := range pop.Records {
		r := &pop.Records[i]
		a := r.Prefix.Addr()
		offered := map[simdns.Protocol]bool{
			simdns.DoUDP: r.HasDNS("udp"), simdns.DoTCP: r.HasDNS("tcp"), simdns.DoT: r.DoT != 0, simdns.DoH: r.DoH != 0,
		}
		for p, want := range offered {
			b, ok := d.Behaviour(a, p)
			if r.Peer != "" {
				want = false
			}
			if ok != want {
				t.Errorf("%s %s %s: offered %v, population %v", r.Class, a, p, ok, want)
				continue
			}
			if !ok {
				continue
			}
			counts[b.Class]++
			switch {
			case r.Hostile != "" && b.Class != simdns.Class(r.Hostile):
				t.Errorf("%s %s: class %s, hostile=%s", r.Class, p, b.Class, r.Hostile)
			case r.Hostile == "" && r.RCode == "REFUSED" && b.Class != simdns.ClassRefused,
				r.Hostile == "" && r.RCode == "NOERROR" && b.Class != simdns.ClassAnswer:
				t.Errorf("%s %s: class %s, rcode %s", r.Class, p, b.Class, r.RCode)
			}
			if b.Answer != pop.Answer {
				t.Errorf("%s: answer %s, population %s", r.Class, b.Answer, pop.Answer)
			}
			if p == simdns.DoT || p == simdns.DoH {
				if _, err := certs.Certificate(a, p, ""); err != nil {
					t.Errorf("%s %s: %v", r.Class, p, err)
				}
			}
		}
	}
	for _, c := range []simdns.Class{simdns.ClassAnswer, simdns.ClassRefused, simdns.ClassGarbage, simdns.ClassTruncated,
		simdns.ClassWrongLength, simdns.ClassReset, simdns.ClassStall} {
		if counts[c] == 0 {
			t.Errorf("no DNS service of class %s in the population", c)
		}
	}
	t.Logf("DNS services by class: %v", counts)
}
