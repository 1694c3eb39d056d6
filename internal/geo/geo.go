// Package geo enriches resolver addresses with AS and location data from MaxMind
// databases (GeoLite2/GeoIP2 City and ASN, read with geoip2-golang), and records which
// database version every row came from (table datasets: build time and SHA-256).
package geo

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"

	"github.com/oschwald/geoip2-golang/v2"

	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/store"
)

// Dataset kinds (table datasets, column kind).
const (
	KindCity = "geoip-city"
	KindASN  = "geoip-asn"
)

// DB is an opened pair of City and ASN databases.
type DB struct {
	city, asn         *geoip2.Reader
	CityInfo, ASNInfo store.Dataset
}

// maxDatabase bounds an mmdb file read into memory (GeoLite2-City is about 60 MB).
const maxDatabase = 1 << 30

// info describes one mmdb file as a store.Dataset (kind, type, build time, hash of b,
// the file's bytes).
func info(path, kind string, r *geoip2.Reader, b []byte) store.Dataset {
	md := r.Metadata()
	h := sha256.Sum256(b)
	return store.Dataset{Kind: kind, DatabaseType: md.DatabaseType,
		BuildTime: md.BuildTime().UTC(), SHA256: h[:], Path: path}
}

// Open opens the City and ASN databases. Both are required: resolver_geo rows name
// both datasets.
func Open(cityPath, asnPath string) (*DB, error) {
	if cityPath == "" || asnPath == "" {
		return nil, errors.New("geo: both a City and an ASN database are needed")
	}
	// Read whole (listfile: a FIFO or a directory is an error, never a wait), then
	// opened from memory and hashed from the same bytes.
	cityBytes, err := listfile.ReadAll(cityPath, maxDatabase)
	if err != nil {
		return nil, fmt.Errorf("geo: city database: %w", err)
	}
	asnBytes, err := listfile.ReadAll(asnPath, maxDatabase)
	if err != nil {
		return nil, fmt.Errorf("geo: ASN database: %w", err)
	}
	city, err := geoip2.OpenBytes(cityBytes)
	if err != nil {
		return nil, fmt.Errorf("geo: city database %s: %w", cityPath, err)
	}
	asn, err := geoip2.OpenBytes(asnBytes)
	if err != nil {
		city.Close()
		return nil, fmt.Errorf("geo: ASN database %s: %w", asnPath, err)
	}
	db := &DB{city: city, asn: asn}
	db.CityInfo = info(cityPath, KindCity, city, cityBytes)
	db.ASNInfo = info(asnPath, KindASN, asn, asnBytes)
	// Fail early on swapped or wrong files, not on the first lookup.
	if _, err = city.City(netip.IPv4Unspecified()); err == nil {
		_, err = asn.ASN(netip.IPv4Unspecified())
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("geo: %w", err)
	}
	return db, nil
}

// Close closes both databases.
func (d *DB) Close() error {
	return errors.Join(d.city.Close(), d.asn.Close())
}

// Register records both datasets (once per hash) and returns their ids.
func (d *DB) Register(ctx context.Context, s *store.Store) (cityID, asnID int64, err error) {
	if cityID, err = s.EnsureDataset(ctx, d.CityInfo); err != nil {
		return 0, 0, err
	}
	if asnID, err = s.EnsureDataset(ctx, d.ASNInfo); err != nil {
		return 0, 0, err
	}
	return cityID, asnID, nil
}

// Location is what the databases say about one address. Absent fields are nil.
type Location struct {
	ASN       *int64
	ASOrg     *string
	Country   *string // ISO 3166-1 alpha-2
	Continent *string // two-letter continent code
	City      *string // English name
	Latitude  *float64
	Longitude *float64
}

func str(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Lookup returns the location and AS of addr. An address in neither database gives an
// empty Location and no error.
func (d *DB) Lookup(addr netip.Addr) (Location, error) {
	var loc Location
	addr = addr.Unmap()
	c, err := d.city.City(addr)
	if err != nil {
		return loc, fmt.Errorf("geo: city %s: %w", addr, err)
	}
	loc.Country = str(c.Country.ISOCode)
	loc.Continent = str(c.Continent.Code)
	loc.City = str(c.City.Names.English)
	loc.Latitude, loc.Longitude = c.Location.Latitude, c.Location.Longitude
	a, err := d.asn.ASN(addr)
	if err != nil {
		return loc, fmt.Errorf("geo: asn %s: %w", addr, err)
	}
	if a.AutonomousSystemNumber != 0 {
		n := int64(a.AutonomousSystemNumber)
		loc.ASN = &n
	}
	loc.ASOrg = str(a.AutonomousSystemOrganization)
	return loc, nil
}

// Row builds the resolver_geo row of addr for the given dataset ids.
func (d *DB) Row(addr netip.Addr, cityID, asnID int64) (store.ResolverGeo, error) {
	loc, err := d.Lookup(addr)
	return store.ResolverGeo{Address: addr.Unmap(), CityDataset: cityID, ASNDataset: asnID,
		ASN: loc.ASN, ASOrg: loc.ASOrg, Country: loc.Country, Continent: loc.Continent,
		City: loc.City, Latitude: loc.Latitude, Longitude: loc.Longitude}, err
}
