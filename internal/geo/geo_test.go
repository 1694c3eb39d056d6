package geo

import (
	"errors"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/geo/geotest"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
)

func TestLookupFromWrittenDatabases(t *testing.T) {
	build := time.Date(2026, 11, 17, 6, 0, 0, 0, time.UTC)
	entries := []geotest.Entry{
		{Prefix: "198.19.1.0/24", ASN: 64501, ASOrg: "Test AS One", Country: "DE", Continent: "EU", City: "Berlin", Lat: 52.5, Lon: 13.4},
		{Prefix: "127.0.0.0/8", ASN: 64502, ASOrg: "Loopback AS", Country: "US", Continent: "NA", Lat: 37.7, Lon: -122.4},
		{Prefix: "2001:db8::/32", ASN: 64503, ASOrg: "Six", Country: "JP", Continent: "AS", City: "Tokyo", Lat: 35.7, Lon: 139.7},
	}
	cityPath, asnPath := geotest.Write(t, t.TempDir(), build, entries)
	db, err := Open(cityPath, asnPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if !db.CityInfo.BuildTime.Equal(build) || db.CityInfo.DatabaseType != "GeoLite2-City" || len(db.CityInfo.SHA256) != 32 {
		t.Fatalf("city info %+v", db.CityInfo)
	}
	if db.ASNInfo.Kind != KindASN || db.CityInfo.Kind != KindCity {
		t.Fatal("kinds")
	}
	probe := map[string]int{"198.19.1.77": 0, "127.0.0.9": 1, "2001:db8::53": 2}
	for a, i := range probe {
		e := entries[i]
		loc, err := db.Lookup(netip.MustParseAddr(a))
		if err != nil {
			t.Fatal(err)
		}
		if loc.ASN == nil || *loc.ASN != int64(e.ASN) || *loc.ASOrg != e.ASOrg || *loc.Country != e.Country ||
			*loc.Continent != e.Continent || *loc.Latitude != e.Lat || *loc.Longitude != e.Lon {
			t.Errorf("%s: %+v", a, loc)
		}
		if (e.City == "") != (loc.City == nil) || (loc.City != nil && *loc.City != e.City) {
			t.Errorf("%s: city %v", a, loc.City)
		}
	}
	// An IPv4-mapped address is looked up as IPv4.
	if loc, _ := db.Lookup(netip.MustParseAddr("::ffff:198.19.1.1")); loc.ASN == nil || *loc.ASN != 64501 {
		t.Errorf("mapped: %+v", loc)
	}
	loc, err := db.Lookup(netip.MustParseAddr("198.18.0.2"))
	if err != nil || loc.ASN != nil || loc.Country != nil {
		t.Errorf("unknown address: %+v %v", loc, err)
	}
	row, err := db.Row(netip.MustParseAddr("198.19.1.5"), 3, 4)
	if err != nil || row.CityDataset != 3 || row.ASNDataset != 4 || *row.City != "Berlin" {
		t.Errorf("row %+v %v", row, err)
	}
}

func TestOpenErrors(t *testing.T) {
	cityPath, asnPath := geotest.Write(t, t.TempDir(), time.Now(), nil)
	if _, err := Open(asnPath, cityPath); err == nil {
		t.Error("swapped databases accepted")
	}
	if _, err := Open(cityPath, ""); err == nil {
		t.Error("missing ASN path accepted")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "nope"), asnPath); err == nil {
		t.Error("missing file accepted")
	}
	// A FIFO is refused at once (a plain open waited for a writer), by type.
	if _, err := Open(cityPath, listfiletest.FIFO(t, t.TempDir(), "asn.mmdb")); !errors.Is(err, listfile.ErrNotRegular) {
		t.Errorf("FIFO as the ASN database: %v, want %v", err, listfile.ErrNotRegular)
	}
}
