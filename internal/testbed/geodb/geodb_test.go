package geodb

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/population"
)

// buildTime is the build time the tests stamp (an input, read back below).
var buildTime = time.Date(2026, 11, 16, 0, 0, 0, 0, time.UTC)

// TestPopulationRoundTrip writes the databases for the committed population, reads every
// listed address back through geoip2-golang and compares with the population's site and
// AS; unlisted addresses must be absent.
func TestPopulationRoundTrip(t *testing.T) {
	pop, err := population.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	files, err := Write(pop, t.TempDir(), buildTime)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(files.City, files.ASN)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if c, a := r.BuildTimes(); !c.Equal(buildTime) || !a.Equal(buildTime) {
		t.Errorf("build times %v %v, want %v", c, a, buildTime)
	}
	if got := r.city.Metadata().DatabaseType; got != CityType {
		t.Errorf("city database_type %q", got)
	}
	if got := r.asn.Metadata().DatabaseType; got != ASNType {
		t.Errorf("asn database_type %q", got)
	}
	n, n6 := 0, 0
	hosts := func(yield func(netip.Addr, *population.Record) bool) {
		for a, rec := range pop.Hosts {
			if !yield(a, rec) {
				return
			}
		}
		for a, rec := range pop.IPv6().Hosts {
			n6++
			if !yield(a, rec) {
				return
			}
		}
	}
	for a, rec := range hosts {
		n++
		g, err := r.Lookup(a)
		if err != nil {
			t.Fatal(err)
		}
		site, hasSite := pop.Sites[rec.Site]
		if g.HasCity != hasSite {
			t.Fatalf("%s: city record %v, population site %q", a, g.HasCity, rec.Site)
		}
		if hasSite {
			if g.Country != site.Country || g.Continent != site.Continent || g.City != site.City ||
				!g.HasCoords || g.Lat != site.Lat || g.Lon != site.Lon {
				t.Fatalf("%s: read %+v, population site %+v", a, g, site)
			}
		}
		as, hasAS := pop.ASNs[rec.ASN]
		if g.HasASN != hasAS {
			t.Fatalf("%s: asn record %v, population AS%d", a, g.HasASN, rec.ASN)
		}
		if hasAS && (g.ASN != as.Number || g.ASOrg != as.Org) {
			t.Fatalf("%s: AS%d %q, population AS%d %q", a, g.ASN, g.ASOrg, as.Number, as.Org)
		}
	}
	if n == 0 {
		t.Fatal("population lists no host")
	}
	// Every unlisted address of the prefix is absent from both databases.
	absent := 0
	for a := pop.Prefix.Addr(); pop.Prefix.Contains(a); a = a.Next() {
		if pop.Lookup(a) != nil {
			continue
		}
		g, err := r.Lookup(a)
		if err != nil {
			t.Fatal(err)
		}
		if g.HasCity || g.HasASN {
			t.Fatalf("unlisted %s found: %+v", a, g)
		}
		absent++
	}
	if n6 == 0 {
		t.Fatal("population lists no IPv6 host")
	}
	for _, s := range []string{"2001:2:0:8001::ff", "2001:2:0:8002::14", "2001:2:0:8000::1"} {
		a := netip.MustParseAddr(s)
		if pop.Lookup(a) != nil {
			t.Fatalf("%s is listed: pick another unlisted IPv6 address", a)
		}
		if g, _ := r.Lookup(a); g.HasCity || g.HasASN {
			t.Fatalf("unlisted %s found: %+v", a, g)
		}
	}
	// And so is an address outside the prefix.
	if g, _ := r.Lookup(netip.MustParseAddr("198.18.0.2")); g.HasCity || g.HasASN {
		t.Fatalf("vantage address found: %+v", g)
	}
	t.Logf("%d listed addresses match the population, %d unlisted ones are absent", n, absent)
}

// TestDeterministic: same population and build time, same bytes; another build time,
// other bytes.
func TestDeterministic(t *testing.T) {
	pop, err := population.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	c1, a1, err := Build(pop, buildTime)
	if err != nil {
		t.Fatal(err)
	}
	c2, a2, err := Build(pop, buildTime)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c1, c2) || !bytes.Equal(a1, a2) {
		t.Fatal("two builds of the same population and time differ")
	}
	c3, a3, err := Build(pop, buildTime.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(c1, c3) || bytes.Equal(a1, a3) {
		t.Fatal("the build time is not in the output")
	}
	r, err := OpenBytes(c3, a3)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if c, _ := r.BuildTimes(); !c.Equal(buildTime.Add(24 * time.Hour)) {
		t.Fatalf("build time %v", c)
	}
	t.Logf("city %d bytes, asn %d bytes", len(c1), len(a1))
}

func TestWriteRejectsZeroTime(t *testing.T) {
	pop, err := population.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(pop, t.TempDir(), time.Time{}); err == nil {
		t.Fatal("zero build time accepted")
	}
}

func TestBadSite(t *testing.T) {
	for _, s := range []population.Site{
		{Name: "x", Country: "DE", Continent: "XX"},
		{Name: "y", Country: "DEU", Continent: "EU"},
	} {
		if _, err := cityRecord(s); err == nil {
			t.Errorf("site %+v accepted", s)
		}
	}
}
