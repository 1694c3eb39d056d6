// Package geotest writes small City- and ASN-shaped mmdb files with mmdbwriter, for
// unit tests of code that reads GeoIP databases. (The testbed's own databases are the
// testbed's business; these only need to be real mmdb files.)
package geotest

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// Entry is what the test databases say about one prefix.
type Entry struct {
	Prefix    string // CIDR
	ASN       uint32
	ASOrg     string
	Country   string
	Continent string
	City      string
	Lat, Lon  float64
}

// Write writes city.mmdb and asn.mmdb into dir (built at build) and returns their paths.
func Write(t testing.TB, dir string, build time.Time, entries []Entry) (cityPath, asnPath string) {
	t.Helper()
	city, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoLite2-City", BuildEpoch: build.Unix(),
		IncludeReservedNetworks: true, IPVersion: 6, RecordSize: 28, Languages: []string{"en"}})
	if err != nil {
		t.Fatal(err)
	}
	asn, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoLite2-ASN", BuildEpoch: build.Unix(),
		IncludeReservedNetworks: true, IPVersion: 6, RecordSize: 28})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		_, n, err := net.ParseCIDR(e.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		rec := mmdbtype.Map{
			"country":   mmdbtype.Map{"iso_code": mmdbtype.String(e.Country)},
			"continent": mmdbtype.Map{"code": mmdbtype.String(e.Continent)},
			"location":  mmdbtype.Map{"latitude": mmdbtype.Float64(e.Lat), "longitude": mmdbtype.Float64(e.Lon)},
		}
		if e.City != "" {
			rec["city"] = mmdbtype.Map{"names": mmdbtype.Map{"en": mmdbtype.String(e.City)}}
		}
		if err := city.Insert(n, rec); err != nil {
			t.Fatal(err)
		}
		if err := asn.Insert(n, mmdbtype.Map{
			"autonomous_system_number":       mmdbtype.Uint32(e.ASN),
			"autonomous_system_organization": mmdbtype.String(e.ASOrg),
		}); err != nil {
			t.Fatal(err)
		}
	}
	cityPath, asnPath = filepath.Join(dir, "city.mmdb"), filepath.Join(dir, "asn.mmdb")
	for p, tree := range map[string]*mmdbwriter.Tree{cityPath: city, asnPath: asn} {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tree.WriteTo(f); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return cityPath, asnPath
}
