// Package geodb writes MaxMind-format GeoIP databases (a GeoLite2-City and a GeoLite2-ASN
// shaped .mmdb) for the simulated internet, from the population file's [sites] and [asns]
// sections and each host's site= and asn= keys, so the enrichment code (cmd/verify)
// reads real mmdb files through geoip2-golang exactly as it reads MaxMind's. It also
// holds the reader that enrichment uses (Open / Lookup), tested against both our files
// and MaxMind's own test databases.
package geodb

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"

	"github.com/doqscan/doqscan/internal/testbed/population"
)

// File names (MaxMind's own, so tools pointed at a GeoIP directory find them).
const (
	CityFile = "GeoLite2-City.mmdb"
	ASNFile  = "GeoLite2-ASN.mmdb"
)

// Database types written into the metadata; geoip2-golang dispatches on them.
const (
	CityType = "GeoLite2-City"
	ASNType  = "GeoLite2-ASN"
)

const (
	// recordSize is the search tree record size in bits (MaxMind's GeoLite2 use 24/28).
	recordSize = 28
	// accuracyRadius (km) written for every location.
	accuracyRadius = 20
	// language of the names written (the metadata's languages list).
	language = "en"
)

// Continent codes and their GeoNames IDs (the IDs MaxMind's databases carry).
var continents = map[string]struct {
	name string
	id   uint32
}{
	"AF": {"Africa", 6255146},
	"AN": {"Antarctica", 6255152},
	"AS": {"Asia", 6255147},
	"EU": {"Europe", 6255148},
	"NA": {"North America", 6255149},
	"OC": {"Oceania", 6255151},
	"SA": {"South America", 6255150},
}

// Countries the testbed uses: English name, GeoNames ID, EU membership. A country not
// listed is written with its ISO code as its name and no GeoNames ID.
var countries = map[string]struct {
	name string
	id   uint32
	eu   bool
}{
	"AU": {"Australia", 2077456, false},
	"BR": {"Brazil", 3469034, false},
	"CA": {"Canada", 6251999, false},
	"CH": {"Switzerland", 2658434, false},
	"CN": {"China", 1814991, false},
	"DE": {"Germany", 2921044, true},
	"FR": {"France", 3017382, true},
	"GB": {"United Kingdom", 2635167, false},
	"IN": {"India", 1269750, false},
	"JP": {"Japan", 1861060, false},
	"KR": {"South Korea", 1835841, false},
	"NL": {"Netherlands", 2750405, true},
	"RU": {"Russia", 2017370, false},
	"SE": {"Sweden", 2661886, true},
	"SG": {"Singapore", 1880251, false},
	"US": {"United States", 6252001, false},
	"ZA": {"South Africa", 953987, false},
}

// Files are the paths Write produced.
type Files struct {
	City, ASN string
}

// Write writes CityFile and ASNFile for pop into dir (created if needed), stamped with
// buildTime as the build epoch. The output depends only on pop and buildTime. Files are
// written to a temporary name and renamed, so a reader never sees half a file.
func Write(pop *population.Population, dir string, buildTime time.Time) (Files, error) {
	if buildTime.IsZero() {
		return Files{}, errors.New("geodb: zero build time (pass the time the database stands for)")
	}
	city, asn, err := Build(pop, buildTime)
	if err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Files{}, fmt.Errorf("geodb: %w", err)
	}
	f := Files{City: filepath.Join(dir, CityFile), ASN: filepath.Join(dir, ASNFile)}
	for _, o := range []struct {
		path string
		data []byte
	}{{f.City, city}, {f.ASN, asn}} {
		tmp := o.path + ".tmp"
		if err := os.WriteFile(tmp, o.data, 0o644); err != nil {
			return Files{}, fmt.Errorf("geodb: %w", err)
		}
		if err := os.Rename(tmp, o.path); err != nil {
			return Files{}, fmt.Errorf("geodb: %w", err)
		}
	}
	return f, nil
}

// Build returns the City and ASN databases for pop as bytes.
func Build(pop *population.Population, buildTime time.Time) (city, asn []byte, err error) {
	opts := func(typ, desc string) mmdbwriter.Options {
		return mmdbwriter.Options{
			BuildEpoch:   buildTime.Unix(),
			DatabaseType: typ,
			Description:  map[string]string{language: desc},
			Languages:    []string{language},
			// 198.18.0.0/15 is reserved benchmarking space (RFC 2544), which the writer
			// refuses unless told.
			IncludeReservedNetworks: true,
			IPVersion:               6, // like MaxMind's: IPv6 tree, IPv4 aliased
			RecordSize:              recordSize,
		}
	}
	ct, err := mmdbwriter.New(opts(CityType, "doqscan testbed: synthetic GeoLite2-City for "+pop.Prefix.String()))
	if err != nil {
		return nil, nil, fmt.Errorf("geodb: %w", err)
	}
	at, err := mmdbwriter.New(opts(ASNType, "doqscan testbed: synthetic GeoLite2-ASN for "+pop.Prefix.String()))
	if err != nil {
		return nil, nil, fmt.Errorf("geodb: %w", err)
	}
	for _, r := range pop.AllRecords() {
		n := &net.IPNet{IP: r.Prefix.Addr().AsSlice(), Mask: net.CIDRMask(r.Prefix.Bits(), r.Prefix.Addr().BitLen())}
		if r.Site != "" {
			site, ok := pop.Sites[r.Site]
			if !ok {
				return nil, nil, fmt.Errorf("geodb: line %d: site %q not defined", r.Line, r.Site)
			}
			rec, err := cityRecord(site)
			if err != nil {
				return nil, nil, fmt.Errorf("geodb: line %d: %w", r.Line, err)
			}
			if err := ct.Insert(n, rec); err != nil {
				return nil, nil, fmt.Errorf("geodb: insert %s: %w", r.Prefix, err)
			}
		}
		if r.ASN != 0 {
			as, ok := pop.ASNs[r.ASN]
			if !ok {
				return nil, nil, fmt.Errorf("geodb: line %d: AS%d not defined", r.Line, r.ASN)
			}
			rec := mmdbtype.Map{"autonomous_system_number": mmdbtype.Uint32(as.Number)}
			if as.Org != "" {
				rec["autonomous_system_organization"] = mmdbtype.String(as.Org)
			}
			if err := at.Insert(n, rec); err != nil {
				return nil, nil, fmt.Errorf("geodb: insert %s: %w", r.Prefix, err)
			}
		}
	}
	var cb, ab bytes.Buffer
	if _, err := ct.WriteTo(&cb); err != nil {
		return nil, nil, fmt.Errorf("geodb: write city: %w", err)
	}
	if _, err := at.WriteTo(&ab); err != nil {
		return nil, nil, fmt.Errorf("geodb: write asn: %w", err)
	}
	return cb.Bytes(), ab.Bytes(), nil
}

func names(en string) mmdbtype.Map { return mmdbtype.Map{language: mmdbtype.String(en)} }

// cityRecord is a GeoLite2-City record (the fields and types MaxMind's databases use).
func cityRecord(s population.Site) (mmdbtype.Map, error) {
	cont, ok := continents[s.Continent]
	if !ok {
		return nil, fmt.Errorf("site %s: unknown continent code %q", s.Name, s.Continent)
	}
	if len(s.Country) != 2 {
		return nil, fmt.Errorf("site %s: country %q is not an ISO 3166-1 alpha-2 code", s.Name, s.Country)
	}
	country := mmdbtype.Map{"iso_code": mmdbtype.String(s.Country), "names": names(s.Country)}
	if c, ok := countries[s.Country]; ok {
		country["names"] = names(c.name)
		country["geoname_id"] = mmdbtype.Uint32(c.id)
		if c.eu {
			country["is_in_european_union"] = mmdbtype.Bool(true)
		}
	}
	rec := mmdbtype.Map{
		"continent": mmdbtype.Map{
			"code":       mmdbtype.String(s.Continent),
			"geoname_id": mmdbtype.Uint32(cont.id),
			"names":      names(cont.name),
		},
		"country":            country,
		"registered_country": country,
		"location": mmdbtype.Map{
			"latitude":        mmdbtype.Float64(s.Lat),
			"longitude":       mmdbtype.Float64(s.Lon),
			"accuracy_radius": mmdbtype.Uint16(accuracyRadius),
		},
	}
	if s.City != "" {
		rec["city"] = mmdbtype.Map{"names": names(s.City)}
	}
	return rec, nil
}
