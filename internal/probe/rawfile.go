package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Manifest is written next to the raw CSV files so `zprobe ingest --raw` can replay them
// with the same scan key and probes.
type Manifest struct {
	Week      string            `json:"iso_week"`
	Vantage   string            `json:"vantage_id"`
	Label     string            `json:"label"`
	Shard     int               `json:"shard"`
	Shards    int               `json:"shards"`
	Seed      *uint64           `json:"seed,omitempty"`
	Ports     map[string]string `json:"ports"` // port -> probe kind
	QUICProbe string            `json:"quic_probe"`
	DNSProbe  string            `json:"dns_probe"`
	Targets   []string          `json:"targets"`
}

// RunDir returns where a scan keeps its raw output: OutDir/<week>/<vantage>/<label>-shard<N>.
func RunDir(outDir, week, vantage, label string, shard int) string {
	return filepath.Join(outDir, week, vantage, fmt.Sprintf("%s-shard%d", label, shard))
}

// metaFor is where the zmap metadata of a raw file is kept once its run is complete
// (<ports>[.attemptN].meta.json next to <ports>[.attemptN].csv): zmap writes it (as
// metaFor+partSuffix) when it exits, and zprobe renames it after it has copied all of
// zmap's output to the raw file, so its presence says the raw file is whole (Replay
// and settlePort read it).
func metaFor(rawPath string) string {
	return strings.TrimSuffix(rawPath, ".csv") + ".meta.json"
}

const partSuffix = ".part"

// rawBase names the raw file of a zmap run: its ports joined by "_" (853, 784_853_8853).
func rawBase(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, "_")
}

var rawNameRE = regexp.MustCompile(`^([0-9]+(?:_[0-9]+)*)(?:\.attempt([0-9]+))?\.csv$`)

// ParseRawName reads the ports and the attempt (1 for the first) from a raw file's
// name: <port>.csv, <port>_<port>....csv, <ports>.attempt<N>.csv.
func ParseRawName(name string) (ports []uint16, attempt int, err error) {
	m := rawNameRE.FindStringSubmatch(filepath.Base(name))
	if m == nil {
		return nil, 0, fmt.Errorf("raw file %s: name must be <port>[_<port>...][.attempt<N>].csv", name)
	}
	for _, f := range strings.Split(m[1], "_") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 65535 {
			return nil, 0, fmt.Errorf("raw file %s: bad port %q", name, f)
		}
		ports = append(ports, uint16(n))
	}
	attempt = 1
	if m[2] != "" {
		if attempt, err = strconv.Atoi(m[2]); err != nil || attempt < 2 {
			return nil, 0, fmt.Errorf("raw file %s: bad attempt %q", name, m[2])
		}
	}
	return ports, attempt, nil
}

// createAttempt creates the raw file of a new zmap run of ports in dir: <ports>.csv for
// the first attempt, <ports>.attempt<N>.csv for the next ones. An existing file is never
// opened for writing: the raw output of an earlier attempt stays as it was.
func createAttempt(dir string, ports []uint16) (*os.File, string, error) {
	base := rawBase(ports)
	for n := 1; n < 10000; n++ {
		name := base + ".csv"
		if n > 1 {
			name = fmt.Sprintf("%s.attempt%d.csv", base, n)
		}
		p, err := filepath.Abs(filepath.Join(dir, name))
		if err != nil {
			return nil, "", err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("raw output: %w", err)
		}
		return f, p, nil
	}
	return nil, "", fmt.Errorf("raw output: too many attempts of %s in %s", base, dir)
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
