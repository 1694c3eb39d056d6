package geodb

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/home"
)

// MaxMind's own small test databases ship inside the PyPI sdist of maxminddb (their
// MaxMind-DB test-data submodule), with the JSON sources they were built from. The test
// reads both straight from the tarball: expectations come from MaxMind's JSON, the lookups
// from our reader path (geoip2-golang).
const (
	maxmindSdist       = "maxminddb-3.2.0.tar.gz"
	maxmindSdistSHA256 = "d28e0073fd1dd637c8b95947bc864b5625eca9f8f2db1538145e33b2a1cd4b92"
	maxmindRequirement = "maxminddb==3.2.0"
	maxmindPrefix      = "maxminddb-3.2.0/tests/data/"
	// envMaxMindSdist points at an already downloaded sdist (or the directory holding it).
	envMaxMindSdist = "DOQSCAN_MAXMIND_SDIST"
	pipTimeout      = 3 * time.Minute
)

// sdistPath finds the sdist: $DOQSCAN_MAXMIND_SDIST, else <module>/var/cache/, where it is
// fetched with `pip download` (PyPI through pip's ordinary client) when missing. It skips
// the test, saying why, when neither works (no pip, no registry).
func sdistPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envMaxMindSdist); p != "" {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			p = filepath.Join(p, maxmindSdist)
		}
		return p
	}
	dir := home.Path("var", "cache")
	p := filepath.Join(dir, maxmindSdist)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("MaxMind test data: %s not in %s and no python3 to pip download %s (set %s)",
			maxmindSdist, dir, maxmindRequirement, envMaxMindSdist)
	}
	ctx, cancel := context.WithTimeout(t.Context(), pipTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
		"--disable-pip-version-check", "-q", "-d", dir, maxmindRequirement).CombinedOutput()
	if err != nil {
		t.Skipf("MaxMind test data: pip download %s failed (%v): %s (set %s to a downloaded sdist)",
			maxmindRequirement, err, strings.TrimSpace(string(out)), envMaxMindSdist)
	}
	return p
}

// sdistFiles reads the named members (relative to maxmindPrefix) from the sdist, checking
// its SHA-256 first.
func sdistFiles(t *testing.T, path string, names ...string) map[string][]byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	if got := hex.EncodeToString(sum[:]); got != maxmindSdistSHA256 {
		t.Fatalf("%s: sha256 %s, want %s", path, got, maxmindSdistSHA256)
	}
	zr, err := gzip.NewReader(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[maxmindPrefix+n] = true
	}
	out := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !want[h.Name] {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(h.Name, maxmindPrefix)] = b
	}
	for _, n := range names {
		if out[n] == nil {
			t.Fatalf("%s has no %s", path, maxmindPrefix+n)
		}
	}
	return out
}

// source is one network of MaxMind's JSON source data, with the fields we read.
type source struct {
	prefix netip.Prefix
	rec    struct {
		ASN       uint32 `json:"autonomous_system_number"`
		ASOrg     string `json:"autonomous_system_organization"`
		Continent struct {
			Code string `json:"code"`
		} `json:"continent"`
		Country struct {
			ISOCode string `json:"iso_code"`
		} `json:"country"`
		City struct {
			Names struct {
				EN string `json:"en"`
			} `json:"names"`
		} `json:"city"`
		Location *struct {
			Lat *float64 `json:"latitude"`
			Lon *float64 `json:"longitude"`
		} `json:"location"`
	}
}

func parseSource(t *testing.T, b []byte) []source {
	t.Helper()
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	var out []source
	for _, m := range raw {
		for k, v := range m {
			var s source
			p, err := netip.ParsePrefix(k)
			if err != nil {
				t.Fatalf("source network %q: %v", k, err)
			}
			s.prefix = p
			if err := json.Unmarshal(v, &s.rec); err != nil {
				t.Fatalf("source %s: %v", k, err)
			}
			out = append(out, s)
		}
	}
	return out
}

// isolated keeps the IPv4 networks no other source network overlaps (where the built
// database must return exactly the source record).
func isolated(src []source) []source {
	var out []source
	for i, s := range src {
		if !s.prefix.Addr().Is4() {
			continue
		}
		alone := true
		for j, o := range src {
			if i != j && s.prefix.Overlaps(o.prefix) {
				alone = false
				break
			}
		}
		if alone {
			out = append(out, s)
		}
	}
	return out
}

// TestMaxMindTestDatabases reads MaxMind's GeoLite2-City and GeoLite2-ASN test databases
// through our reader and compares every isolated IPv4 network with MaxMind's JSON source.
func TestMaxMindTestDatabases(t *testing.T) {
	const (
		cityDB  = "test-data/GeoLite2-City-Test.mmdb"
		asnDB   = "test-data/GeoLite2-ASN-Test.mmdb"
		citySrc = "source-data/GeoLite2-City-Test.json"
		asnSrc  = "source-data/GeoLite2-ASN-Test.json"
	)
	files := sdistFiles(t, sdistPath(t), cityDB, asnDB, citySrc, asnSrc)
	r, err := OpenBytes(files[cityDB], files[asnDB])
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if c, a := r.BuildTimes(); c.IsZero() || a.IsZero() {
		t.Fatalf("build times %v %v", c, a)
	}
	checked := 0
	for _, s := range isolated(parseSource(t, files[citySrc])) {
		for _, a := range []netip.Addr{s.prefix.Addr(), lastAddr(s.prefix)} {
			g, err := r.Lookup(a)
			if err != nil {
				t.Fatal(err)
			}
			want := s.rec
			if !g.HasCity || g.Country != want.Country.ISOCode || g.Continent != want.Continent.Code ||
				g.City != want.City.Names.EN {
				t.Fatalf("%s (%s): read %+v, source %+v", a, s.prefix, g, want)
			}
			if want.Location != nil && want.Location.Lat != nil {
				if !g.HasCoords || g.Lat != *want.Location.Lat || g.Lon != *want.Location.Lon {
					t.Fatalf("%s: coordinates %v,%v, source %v,%v", a, g.Lat, g.Lon, *want.Location.Lat, *want.Location.Lon)
				}
			}
			checked++
		}
	}
	asnChecked := 0
	for _, s := range isolated(parseSource(t, files[asnSrc])) {
		g, err := r.Lookup(s.prefix.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if !g.HasASN || g.ASN != s.rec.ASN || g.ASOrg != s.rec.ASOrg {
			t.Fatalf("%s: AS%d %q, source AS%d %q", s.prefix, g.ASN, g.ASOrg, s.rec.ASN, s.rec.ASOrg)
		}
		asnChecked++
	}
	if checked == 0 || asnChecked == 0 {
		t.Fatalf("nothing compared (%d city, %d asn)", checked, asnChecked)
	}
	t.Logf("MaxMind test data: %d City lookups and %d ASN lookups match the JSON sources", checked, asnChecked)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
