// Package manifest reads and writes the manifest of a doqscan data release
// (manifest.json at the release directory's top): which file sets (one per ISO week and
// vantage point) it holds, each file's table, row count, size and SHA-256. It has no
// Parquet dependency, so the opt-out page reads it to say truthfully what is published.
package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// SchemaVersion is the version of the release's tables and columns
// (docs/data-release.md). It changes when a column is removed, renamed or changes
// meaning; readers check it.
const SchemaVersion = 1

// Name is the manifest's file name at the top of a release directory.
const Name = "manifest.json"

// Format names what a manifest describes.
const Format = "doqscan-release"

// BenchmarksVantage is the directory of a week's benchmark runs (dnsbench), which
// belong to no vantage point; no vantage_id can start with "_".
const BenchmarksVantage = "_benchmarks"

// File is one file of a release.
type File struct {
	Path   string `json:"path"`  // relative to the release directory, '/'-separated
	Table  string `json:"table"` // the table it holds (docs/data-release.md), or "qlogs" for the archive
	Rows   int64  `json:"rows"`  // rows (the archive: files in it)
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"` // hex
}

// FileSet is the files of one ISO week and vantage point.
type FileSet struct {
	ISOWeek     string    `json:"iso_week"`
	Vantage     string    `json:"vantage_id"`
	Fingerprint string    `json:"fingerprint"` // what the set was written from; same fingerprint, same bytes
	WrittenAt   time.Time `json:"written_at"`
	Files       []File    `json:"files"`
}

// Manifest is manifest.json.
type Manifest struct {
	Format        string    `json:"format"`
	SchemaVersion int       `json:"schema_version"`
	Docs          string    `json:"docs"`
	UpdatedAt     time.Time `json:"updated_at"`
	// OptOutsExcluded is how many honoured opt-out ranges the newest file sets leave out
	// (the ranges themselves are not published).
	OptOutsExcluded int       `json:"optouts_excluded"`
	Files           []File    `json:"files"` // release-wide tables (vantage points, datasets)
	FileSets        []FileSet `json:"file_sets"`
}

// ErrNoRelease: the directory holds no manifest.
var ErrNoRelease = errors.New("no release manifest")

// Read reads dir/manifest.json; ErrNoRelease when it does not exist.
func Read(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, Name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s", ErrNoRelease, dir)
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, Name), err)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("%s: format %q, want %q", filepath.Join(dir, Name), m.Format, Format)
	}
	return &m, nil
}

// Write writes m to dir/manifest.json atomically, file sets in (week, vantage) order.
func Write(dir string, m *Manifest) error {
	m.Format = Format
	sort.Slice(m.FileSets, func(i, j int) bool {
		a, b := m.FileSets[i], m.FileSets[j]
		if a.ISOWeek != b.ISOWeek {
			return a.ISOWeek < b.ISOWeek
		}
		return a.Vantage < b.Vantage
	})
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+Name+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, Name))
}

// Set returns the file set of (week, vantage), nil when absent.
func (m *Manifest) Set(week, vantage string) *FileSet {
	for i := range m.FileSets {
		if m.FileSets[i].ISOWeek == week && m.FileSets[i].Vantage == vantage {
			return &m.FileSets[i]
		}
	}
	return nil
}

// Put adds or replaces the file set of (fs.ISOWeek, fs.Vantage).
func (m *Manifest) Put(fs FileSet) {
	if old := m.Set(fs.ISOWeek, fs.Vantage); old != nil {
		*old = fs
		return
	}
	m.FileSets = append(m.FileSets, fs)
}

// Weeks returns the first and last ISO week with a file set of a vantage point
// (benchmark sets aside), and the vantage points; empty when there is none.
func (m *Manifest) Weeks() (first, last string, vantages []string) {
	seen := map[string]bool{}
	for _, fs := range m.FileSets {
		if fs.Vantage == BenchmarksVantage {
			continue
		}
		if first == "" || fs.ISOWeek < first {
			first = fs.ISOWeek
		}
		if fs.ISOWeek > last {
			last = fs.ISOWeek
		}
		if !seen[fs.Vantage] {
			seen[fs.Vantage] = true
			vantages = append(vantages, fs.Vantage)
		}
	}
	sort.Strings(vantages)
	return first, last, vantages
}

// DefaultDir is where a release is written when no directory is given: release/ of the
// doqscan home (home: the checkout, or $DOQSCAN_HOME), beside reports/.
func DefaultDir(home string) string { return filepath.Join(home, "release") }
