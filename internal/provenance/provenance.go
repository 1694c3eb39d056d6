// Package provenance says what produced a run: the build of the tool (release, VCS
// revision, Go version), the host, the vantage point (id, location, contact) and the
// inputs that decide what was sent or how it was read (zmap binary and version, the
// probes' SHA-256, the GeoIP databases' builds). Every stage stores one Record with its
// run row (scans, verification_runs, campaigns: the provenance column), and every tool's
// --version prints Build.
package provenance

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/doqscan/doqscan"
)

// Set at link time by ./dev build:
//
//	-ldflags "-X github.com/doqscan/doqscan/internal/provenance.revision=$(git rev-parse HEAD)
//	          -X github.com/doqscan/doqscan/internal/provenance.modified=true"
//
// Without them (go build -buildvcs=false, go test, not a git checkout) the revision comes
// from the binary's embedded VCS information, or is "unknown".
var (
	revision string
	modified string
)

// Unknown is the revision of a binary built without VCS information.
const Unknown = "unknown"

// Build identifies a binary.
type Build struct {
	Version   string `json:"version"`            // the release (doqscan.Version, or the module version when installed by version)
	Revision  string `json:"revision"`           // VCS commit, or "unknown"
	Modified  bool   `json:"modified,omitempty"` // built from a work tree with uncommitted changes
	GoVersion string `json:"go_version"`
}

// ReadBuild returns this binary's Build.
func ReadBuild() Build {
	b := Build{Version: doqscan.Version, Revision: revision, Modified: modified == "true", GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if ok {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			b.Version = v
		}
		if b.Revision == "" {
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					b.Revision = s.Value
				case "vcs.modified":
					b.Modified = s.Value == "true"
				}
			}
		}
	}
	if b.Revision == "" {
		b.Revision = Unknown
	}
	return b
}

// String is what --version prints after the tool's name:
// "0.1.0-dev (revision 0123456789ab, modified; go1.26.0)".
func (b Build) String() string {
	rev := b.Revision
	if len(rev) > 12 && rev != Unknown {
		rev = rev[:12]
	}
	if b.Modified {
		rev += ", modified"
	}
	return fmt.Sprintf("%s (revision %s; %s)", b.Version, rev, b.GoVersion)
}

// Vantage is where a run measured from and whom to contact about it.
type Vantage struct {
	ID       string `json:"id"`
	Location string `json:"location,omitempty"` // free text: city, data centre, coordinates
	Contact  string `json:"contact,omitempty"`  // who answers for this vantage point (email)
}

// Zmap is the zmap binary a scan ran.
type Zmap struct {
	Binary  string `json:"binary"`  // as configured
	Path    string `json:"path"`    // resolved on PATH
	Version string `json:"version"` // first line of zmap --version
}

// Probe is one probe payload sent by a scan.
type Probe struct {
	Kind   string `json:"kind"` // quic-vn | dns
	Ports  []int  `json:"ports"`
	SHA256 string `json:"sha256"` // hex, of the UDP payload
}

// NewProbe describes a payload sent to ports.
func NewProbe(kind string, ports []int, sha256 []byte) Probe {
	return Probe{Kind: kind, Ports: ports, SHA256: hex.EncodeToString(sha256)}
}

// Dataset is one external database a run read (GeoIP).
type Dataset struct {
	Kind         string    `json:"kind"` // geoip-city | geoip-asn | ...
	DatabaseType string    `json:"database_type,omitempty"`
	BuildTime    time.Time `json:"build_time"`
	SHA256       string    `json:"sha256"` // hex
	Path         string    `json:"path,omitempty"`
}

// Record is the provenance of one run of one stage.
type Record struct {
	Tool    string    `json:"tool"` // zprobe, verify, measure, dataset
	Build   Build     `json:"build"`
	Host    string    `json:"host"`
	Vantage Vantage   `json:"vantage"`
	Zmap    *Zmap     `json:"zmap,omitempty"`
	Probes  []Probe   `json:"probes,omitempty"`
	GeoIP   []Dataset `json:"geoip,omitempty"`
}

// New starts the Record of a run of tool from vantage point v.
func New(tool string, v Vantage) Record {
	host, _ := os.Hostname()
	return Record{Tool: tool, Build: ReadBuild(), Host: host, Vantage: v}
}

// JSON is the record as stored in a run row's provenance column.
func (r Record) JSON() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic("provenance: " + err.Error()) // only strings, ints and times: cannot fail
	}
	return b
}
