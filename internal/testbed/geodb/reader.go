package geodb

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/oschwald/geoip2-golang/v2"
)

// Geo is what enrichment records about one address (AS number and name,
// country, continent, coordinates).
type Geo struct {
	ASN       uint32
	ASOrg     string
	Country   string // ISO 3166-1 alpha-2
	Continent string // two-letter continent code
	City      string // English name
	Lat, Lon  float64
	HasCity   bool // the City database had a record for the address
	HasASN    bool // the ASN database had a record for the address
	HasCoords bool // the record carried coordinates
}

// Reader reads a City and/or an ASN database with geoip2-golang (MaxMind's or ours).
type Reader struct {
	city, asn *geoip2.Reader
}

// Open opens the City and ASN databases; either path may be empty.
func Open(cityPath, asnPath string) (*Reader, error) {
	r := &Reader{}
	if cityPath != "" {
		c, err := geoip2.Open(cityPath)
		if err != nil {
			return nil, fmt.Errorf("geodb: open %s: %w", cityPath, err)
		}
		r.city = c
	}
	if asnPath != "" {
		a, err := geoip2.Open(asnPath)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("geodb: open %s: %w", asnPath, err)
		}
		r.asn = a
	}
	return r, nil
}

// OpenBytes is Open for databases held in memory.
func OpenBytes(city, asn []byte) (*Reader, error) {
	r := &Reader{}
	var err error
	if city != nil {
		if r.city, err = geoip2.OpenBytes(city); err != nil {
			return nil, fmt.Errorf("geodb: city: %w", err)
		}
	}
	if asn != nil {
		if r.asn, err = geoip2.OpenBytes(asn); err != nil {
			r.Close()
			return nil, fmt.Errorf("geodb: asn: %w", err)
		}
	}
	return r, nil
}

// Lookup returns what the databases know about a.
func (r *Reader) Lookup(a netip.Addr) (Geo, error) {
	var g Geo
	if r.city != nil {
		c, err := r.city.City(a)
		if err != nil {
			return g, fmt.Errorf("geodb: city %s: %w", a, err)
		}
		g.HasCity = c.HasData()
		g.Country = c.Country.ISOCode
		g.Continent = c.Continent.Code
		g.City = c.City.Names.English
		if c.Location.HasCoordinates() {
			g.Lat, g.Lon, g.HasCoords = *c.Location.Latitude, *c.Location.Longitude, true
		}
	}
	if r.asn != nil {
		s, err := r.asn.ASN(a)
		if err != nil {
			return g, fmt.Errorf("geodb: asn %s: %w", a, err)
		}
		g.HasASN = s.HasData()
		g.ASN = uint32(s.AutonomousSystemNumber)
		g.ASOrg = s.AutonomousSystemOrganization
	}
	return g, nil
}

// BuildTimes returns the build epochs of the open databases (zero for one not open): the
// database date enrichment stores with each result.
func (r *Reader) BuildTimes() (city, asn time.Time) {
	if r.city != nil {
		city = time.Unix(int64(r.city.Metadata().BuildEpoch), 0).UTC()
	}
	if r.asn != nil {
		asn = time.Unix(int64(r.asn.Metadata().BuildEpoch), 0).UTC()
	}
	return city, asn
}

// Close closes the databases.
func (r *Reader) Close() error {
	var errs []error
	if r.city != nil {
		errs = append(errs, r.city.Close())
	}
	if r.asn != nil {
		errs = append(errs, r.asn.Close())
	}
	return errors.Join(errs...)
}
