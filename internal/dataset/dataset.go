// Package dataset imports measurement data another study published — the PAM 2022 DoQ
// study's (Kosek et al.) and its pre-study's files — into doqscan's tables, under a
// vantage point and label naming the source, so the notebooks read it like a testbed or
// production round. One import is one transaction: a malformed file (named with its line,
// or SQLite table and row) leaves nothing behind, and importing the same files again adds
// nothing (every row has its natural key).
package dataset

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/release"
	"github.com/doqscan/doqscan/internal/runkey"
	"github.com/doqscan/doqscan/internal/store"
)

// DefaultVantage names the study's measurement host (TUM, Munich).
const DefaultVantage = "pam2022-tum"

// PortUnknown is the port of a fact whose source did not record the port (the pre-study's
// verifier lists; the misc edns-tcp-keepalive table). Migration 0006 documents it.
const PortUnknown = 0

// ErrBadName says a vantage point or label is not a valid name.
var ErrBadName = errors.New("bad name")

// ErrNoDirectory says the directory to import does not exist or is not a directory.
var ErrNoDirectory = errors.New("no such directory")

// Config is what one import needs.
type Config struct {
	Dir         string // the directory to import
	Vantage     string // vantage_id the rows are stored under (DefaultVantage if empty)
	Label       string // label of scans, runs and campaigns (the directory's name if empty)
	Description string // the vantage point's description (a default naming the study if empty)
	DryRun      bool   // read and check every file, write nothing
	Log         *slog.Logger
	// Export is the configuration of "dataset export" (internal/release): weeks,
	// vantage points, --force; its directory is the command's argument.
	Export release.Config
}

// Summary counts what an import read and wrote.
type Summary struct {
	DatasetID int64            `json:"dataset_id"`
	Existed   bool             `json:"existed"` // the same files were imported before
	Vantage   string           `json:"vantage"`
	Label     string           `json:"label"`
	Files     map[string]int   `json:"files"`    // per format
	Weeks     []string         `json:"weeks"`    // ISO weeks with scans or verification runs
	New       map[string]int64 `json:"new_rows"` // per table: rows added by this import
}

var reLabel = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// DefaultLabel derives a label from a directory name ("dns-analysis-2021").
func DefaultLabel(dir string) string {
	b := strings.ToLower(filepath.Base(filepath.Clean(dir)))
	b = regexp.MustCompile(`[^a-z0-9._-]+`).ReplaceAllString(b, "-")
	b = strings.TrimLeft(b, "-._")
	if len(b) > 55 {
		b = b[:55]
	}
	if b == "" {
		b = "import"
	}
	return b
}

// CheckName says whether s is a valid vantage_id or label.
func CheckName(s string) error {
	if !reLabel.MatchString(s) {
		return fmt.Errorf("%w %q: want lower-case letters, digits, '.', '_' or '-' (at most 63, first a letter or digit)", ErrBadName, s)
	}
	return nil
}

// Tool is the dataset command: the subcommands import and export, their flags bound to
// a Config (export's to its Export); what they print goes to stdout.
func Tool(stdout io.Writer) *cli.Tool {
	var cfg Config
	return &cli.Tool{Command: Cmd, Subcommands: []cli.Subcommand{
		{Name: "import", Summary: "import a directory of another study's published files (one transaction)",
			Usage: "dataset import [flags] DIR", Notes: importNotes,
			Examples: []string{
				"dataset import ../shared/datasets/dns-analysis-2021                 # the pre-study (label dns-analysis-2021, vantage pam2022-tum)",
				"dataset import ../shared/datasets/misc-dns-measurements-2021        # its misc SQLite files",
				"dataset import --label pam2022-w03 --vantage pam2022-tum DIR        # a directory laid out like the published archives",
				"dataset import --dry-run DIR                                        # read and check every file, write nothing",
			},
			Flags: func(set *flag.FlagSet) cli.RunFunc {
				set.StringVar(&cfg.Vantage, "vantage", DefaultVantage, "vantage_id the imported rows are stored under")
				set.StringVar(&cfg.Label, "label", "", "label of the imported scans, verification runs and campaigns (default: DIR's name)")
				set.StringVar(&cfg.Description, "description", "", "description of the vantage point when it is new (default names the study)")
				set.BoolVar(&cfg.DryRun, "dry-run", false, "read and check every file, print what would be imported, write nothing")
				return func(ctx context.Context, log *slog.Logger, args []string) error {
					return ImportCommand(ctx, log, cfg, args, stdout)
				}
			}},
		{Name: "export", Summary: "write doqscan's data as a Parquet release, one file set per ISO week and vantage point",
			Usage: "dataset export [flags] [DIR]", Notes: exportNotes,
			Examples: []string{
				"dataset export                                                      # every week into release/ of the doqscan home (resumable)",
				"dataset export --weeks 2021-W26,2021-W27 /tmp/release               # two weeks",
				"dataset export --vantages vp0 --force /tmp/release                  # one vantage point, unchanged weeks rewritten too",
			},
			Flags: func(set *flag.FlagSet) cli.RunFunc {
				set.Func("weeks", "ISO weeks to write, comma-separated (default: every week with data)", func(v string) error {
					cfg.Export.Weeks = append(cfg.Export.Weeks, cli.SplitList(v)...)
					return nil
				})
				set.Func("vantages", "vantage points to write, comma-separated (default: all)", func(v string) error {
					cfg.Export.Vantages = append(cfg.Export.Vantages, cli.SplitList(v)...)
					return nil
				})
				set.BoolVar(&cfg.Export.Force, "force", false, "rewrite file sets whose runs and opt-outs are unchanged")
				return func(ctx context.Context, log *slog.Logger, args []string) error {
					return release.Command(ctx, log, cfg.Export, args, stdout)
				}
			}},
	}}
}

// Cmd is dataset's help.
var Cmd = cli.Command{
	Name:    "dataset",
	Summary: "import another study's published measurement files into the database; export doqscan's data as a Parquet release",
	Usage:   "dataset import [flags] DIR | dataset export [flags] [DIR]",
	Examples: []string{
		"dataset import ../shared/datasets/dns-analysis-2021                 # the pre-study (label dns-analysis-2021, vantage pam2022-tum)",
		"dataset import ../shared/datasets/misc-dns-measurements-2021        # its misc SQLite files",
		"dataset import --label pam2022-w03 --vantage pam2022-tum DIR        # a directory laid out like the published archives",
		"dataset import --dry-run DIR                                        # read and check every file, write nothing",
		"dataset export                                                      # every week into release/ of the doqscan home (resumable)",
		"dataset export --weeks 2021-W26,2021-W27 /tmp/release               # two weeks",
		"dataset export --vantages vp0 --force /tmp/release                  # one vantage point, unchanged weeks rewritten too",
	},
	Notes: importNotes + "\n\n" + exportNotes,
}

const importNotes = `import walks DIR recursively; files are recognised by name: DD-MM-YYYY-<port>.csv (ZMap
list), DD-MM-YYYY[-<port>]-verified.csv (verifier list; without a port the port is
unknown and stored as 0), DD-MM-YYYY-combined.csv (checked, not stored twice), certs*.csv
(certificate CSV), ip-location*.csv (locations), *.db (misc or performance SQLite, told
apart by their tables). Other files are listed in dataset_files as not imported.
One import is one transaction: a malformed file stops it with the file and line (or
table and row) and nothing is written; so do a list or CSV file cut short (its last line
without a line end), bytes that are not UTF-8, and an entry that is not a regular file or
directory (FIFO, socket, link to nothing). A directory with nothing to import is a usage
error (exit 2). Importing the same files again adds nothing.
The summary (rows added per table) is printed as JSON on stdout. See docs/dataset.md.`

const exportNotes = `export writes the database as Parquet files, one set per ISO week and vantage point, with
the week's qlogs in one archive per set and manifest.json (rows, bytes, SHA-256 per file).
A set whose runs and honoured opt-outs are unchanged is skipped; written again it is the
same bytes. Honoured opt-out ranges are left out. --vantage, --label, --description and
--dry-run are import flags; --weeks, --vantages and --force export flags. See
docs/data-release.md.`

// ImportCommand is "dataset import DIR" (args: DIR), cfg the flags. It imports the
// directory (Run, opening the store with cli.OpenStore), logs what it did and prints
// the Summary as JSON on stdout. A missing directory is a missing prerequisite (exit
// code 5), a bad --vantage or --label a usage error (2).
func ImportCommand(ctx context.Context, log *slog.Logger, cfg Config, args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return cli.Usagef("want: dataset import [flags] DIR (got %q)", strings.Join(args, " "))
	}
	cfg.Dir, cfg.Log = args[0], log
	if log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	sum, err := Run(ctx, cfg, func(ctx context.Context) (*store.Store, error) { return cli.OpenStore(ctx, cfg.Log) })
	switch {
	case errors.Is(err, ErrNoDirectory):
		return cli.Environmentf("%v", err)
	case errors.Is(err, ErrBadName), errors.Is(err, ErrNothingToImport):
		return cli.Usagef("%v", err)
	case err != nil:
		return err
	}
	cfg.Log.Info("done", "dataset_id", sum.DatasetID, "vantage", sum.Vantage, "label", sum.Label,
		"weeks", len(sum.Weeks), "imported_before", sum.Existed, "dry_run", cfg.DryRun)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(sum)
}

// Run imports cfg.Dir, or with cfg.DryRun only reads and checks it (open is then not
// called).
func Run(ctx context.Context, cfg Config, open func(context.Context) (*store.Store, error)) (*Summary, error) {
	if cfg.DryRun {
		return Check(ctx, cfg)
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	st, err := open(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	cfg.Log.Info("importing", "dir", cfg.Dir, "vantage", cfg.Vantage, "label", cfg.Label)
	return Import(ctx, st, cfg)
}

// Check reads and checks every file of cfg.Dir without writing: the summary counts files
// per format and weeks; no rows.
func Check(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	p, err := readDir(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p.mergeMisc()
	sum := &Summary{Vantage: cfg.Vantage, Label: cfg.Label, Files: map[string]int{}, Weeks: p.weekList()}
	for _, f := range p.files {
		sum.Files[f.Format]++
	}
	return sum, nil
}

// Import reads cfg.Dir and writes it into st in one transaction.
func Import(ctx context.Context, st *store.Store, cfg Config) (*Summary, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	p, err := readDir(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return p.write(ctx, st, cfg)
}

func (cfg *Config) defaults() error {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Vantage == "" {
		cfg.Vantage = DefaultVantage
	}
	if cfg.Label == "" {
		cfg.Label = DefaultLabel(cfg.Dir)
	}
	if cfg.Description == "" {
		cfg.Description = "imported: Kosek et al., PAM 2022 (DoQ study), measured from TUM, Munich"
	}
	for _, n := range []string{cfg.Vantage, cfg.Label} {
		if err := CheckName(n); err != nil {
			return fmt.Errorf("vantage or label: %w", err)
		}
	}
	if fi, err := os.Stat(cfg.Dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: %s", ErrNoDirectory, cfg.Dir)
	}
	return nil
}

// fileRec is one file of the directory, as dataset_files records it.
type fileRec struct {
	Path    string
	Format  string
	SHA256  []byte
	Size    int64
	Records int64
	Detail  string
}

// weekData is what the files say about one ISO week.
type weekData struct {
	Week      string
	Date      time.Time                  // the scan's day (from the file names)
	Scan      map[int32][]netip.Addr     // port -> addresses that answered
	ScanFiles map[int32]string           // port -> file
	Verified  map[verKey]*verifiedRecord // (address, port) -> result
	Files     []string                   // list files of the week
}

type verKey struct {
	Addr netip.Addr
	Port int32
}

type verifiedRecord struct {
	Source  string // file
	ALPN    *string
	Version *int64
	Cert    []byte // SHA-256 of the leaf (misc)
}

// plan is everything read from the directory before anything is written.
type plan struct {
	files    []fileRec
	weeks    map[string]*weekData
	certCSVs []certFile
	location []locationRecord
	locFile  string
	misc     []miscFile
	perf     []perfFile
	latest   time.Time
}

type certFile struct {
	Path string
	Week string // "" until resolved
	Rule string // how the week was chosen
	Recs []certRecord
}

type miscFile struct {
	Path string
	Week string
	DB   *miscDB
}

type perfFile struct {
	Path string
	DB   *perfDB
}

// listFile parses a list file (data, at rel) and returns it with the week of its date d.
func (p *plan) listFile(rel string, d time.Time, data []byte) (addrList, *weekData, error) {
	l, le := parseAddrList(strings.NewReader(string(data)))
	if le != nil {
		return l, nil, lineFileError(rel, le)
	}
	wd, err := p.week(rel, d)
	return l, wd, err
}

func (p *plan) week(path string, d time.Time) (*weekData, error) {
	w := runkey.Week(d)
	wd := p.weeks[w]
	if wd == nil {
		wd = &weekData{Week: w, Date: d, Scan: map[int32][]netip.Addr{}, ScanFiles: map[int32]string{},
			Verified: map[verKey]*verifiedRecord{}}
		p.weeks[w] = wd
	}
	if !wd.Date.Equal(d) {
		return nil, &FileError{Path: path, Err: malformed("date %s is in ISO week %s, which %s already dates %s",
			d.Format("02-01-2006"), w, wd.Files[0], wd.Date.Format("02-01-2006"))}
	}
	wd.Files = append(wd.Files, path)
	if d.After(p.latest) {
		p.latest = d
	}
	return wd, nil
}

// readDir walks the directory and parses every file it knows; the rest is listed as
// not imported.
func readDir(ctx context.Context, cfg Config) (*plan, error) {
	p := &plan{weeks: map[string]*weekData{}}
	var paths []string
	// Links are followed (to files and directories); anything the walk cannot read as a
	// file or directory (a FIFO, socket, device, a link to nothing, an unreadable
	// directory) and a directory named like a data file stop the import: a file the
	// import should have read is never skipped without a word.
	err := listfile.Walk(cfg.Dir, func(path string, mode fs.FileMode, err error) error {
		rel, _ := filepath.Rel(cfg.Dir, path)
		rel = filepath.ToSlash(rel)
		switch {
		case err != nil:
			var oe *listfile.OpenError
			if errors.As(err, &oe) {
				err = oe.Err // FileError names the path
			}
			return &FileError{Path: rel, Err: fmt.Errorf("%w: cannot read it as a file: %w", ErrMalformed, err)}
		case mode.IsDir() && path != cfg.Dir && dataFileName(filepath.Base(path)):
			return &FileError{Path: rel, Err: malformed("a directory named like a data file")}
		case mode.IsRegular():
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	for _, path := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(cfg.Dir, path)
		rel = filepath.ToSlash(rel)
		rec, err := p.readFile(ctx, path, rel)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, rec)
		cfg.Log.Debug("read", "file", rel, "format", rec.Format, "records", rec.Records)
	}
	// Certificate CSVs without a date in their name: certs.csv was collected in the first
	// scan week, certs-last.csv in the last (the pre-study's repository; see docs/dataset.md).
	wks := p.weekList()
	for i := range p.certCSVs {
		c := &p.certCSVs[i]
		if c.Week != "" {
			continue
		}
		name := filepath.Base(c.Path)
		switch {
		case len(wks) == 0:
			return nil, &FileError{Path: c.Path, Err: fmt.Errorf("cannot tell which week the certificates were collected in: no dated scan or verifier file beside it (name it certs-DD-MM-YYYY.csv)")}
		case name == "certs.csv":
			c.Week, c.Rule = wks[0], "first scan week of the directory"
		case name == "certs-last.csv":
			c.Week, c.Rule = wks[len(wks)-1], "last scan week of the directory"
		default:
			return nil, &FileError{Path: c.Path, Err: fmt.Errorf("cannot tell which week the certificates were collected in (name it certs-DD-MM-YYYY.csv)")}
		}
	}
	for i := range p.files {
		for _, c := range p.certCSVs {
			if c.Path == p.files[i].Path && c.Rule != "" {
				p.files[i].Detail = "week " + c.Week + ": " + c.Rule
			}
		}
	}
	return p, p.checkNotEmpty(cfg.Dir)
}

// ErrNothingToImport says the directory holds no file with a record to import (empty,
// or laid out unlike the study's archives): importing it would record a dataset of
// nothing.
var ErrNothingToImport = errors.New("nothing to import")

// checkNotEmpty refuses a plan without a single imported record.
func (p *plan) checkNotEmpty(dir string) error {
	other := 0
	for _, f := range p.files {
		if f.Format != formatNotImported && f.Records > 0 {
			return nil
		}
		other++
	}
	return fmt.Errorf("%w in %s: %d file(s), none with a record in a format the importer knows "+
		"(DD-MM-YYYY-<port>.csv, DD-MM-YYYY[-<port>]-verified.csv, certs*.csv, ip-location*.csv, *.db; see docs/dataset.md)",
		ErrNothingToImport, dir, other)
}

// formatNotImported is the format of a file the importer lists but does not read.
const formatNotImported = "not-imported"

// dataFileName says whether name is one the importer reads as a data file.
func dataFileName(name string) bool {
	for _, re := range []*regexp.Regexp{reUnion, reVerified, reZmapList, reCertCSV, reLocationCSV, reSQLite} {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

func (p *plan) weekList() []string {
	var w []string
	for k := range p.weeks {
		w = append(w, k)
	}
	sort.Strings(w)
	return w
}

// readFile classifies one file by its name and parses it: a list of verified addresses,
// a zmap port list, a certificate or location CSV, a SQLite database, or a file not
// imported (recorded with the reason). Every file is hashed; a data file's text is
// checked first.
func (p *plan) readFile(ctx context.Context, path, rel string) (fileRec, error) {
	rec := fileRec{Path: rel, Format: formatNotImported}
	data, err := listfile.ReadAll(path, 0)
	if err != nil {
		return rec, fmt.Errorf("read %s: %w", rel, err)
	}
	h := sha256.Sum256(data)
	rec.SHA256, rec.Size = h[:], int64(len(data))
	name := filepath.Base(rel)
	if dataFileName(name) && !reSQLite.MatchString(name) {
		if le := checkText(data); le != nil {
			return rec, lineFileError(rel, le)
		}
	}

	switch {
	case reUnion.MatchString(name):
		rec.Format = "zmap-union"
		l, le := parseAddrList(strings.NewReader(string(data)))
		if le != nil {
			return rec, lineFileError(rel, le)
		}
		rec.Records = int64(l.Lines)
		rec.Detail = "the union of the port lists of the same day; not stored twice"
	case reVerified.MatchString(name):
		return p.readVerified(rec, name, data)
	case reZmapList.MatchString(name):
		return p.readZmapList(rec, name, data)
	case reCertCSV.MatchString(name):
		return p.readCertCSV(rec, name, data)
	case reLocationCSV.MatchString(name):
		return p.readLocationCSV(rec, data)
	case reSQLite.MatchString(name):
		return p.readSQLite(ctx, path, rel, rec)
	case reSQLiteSidecar.MatchString(name):
		rec.Detail = "SQLite sidecar file (the database is opened immutable)"
	default:
		rec.Detail = notImportedReason(rel)
	}
	return rec, nil
}

// lineFileError is the FileError of a line of the file at rel.
func lineFileError(rel string, le *lineError) error {
	return &FileError{Path: rel, Line: le.Line, Err: le.Err}
}

// readVerified reads a list of verified addresses (its date and, if recorded, the port
// from its name) into the week's verification results.
func (p *plan) readVerified(rec fileRec, name string, data []byte) (fileRec, error) {
	rel := rec.Path
	m := reVerified.FindStringSubmatch(name)
	d, err := fileDate(m[1])
	if err != nil {
		return rec, &FileError{Path: rel, Err: err}
	}
	port := int32(PortUnknown)
	if m[2] != "" {
		n, _ := strconv.Atoi(m[2])
		if n > 65535 {
			return rec, &FileError{Path: rel, Err: malformed("port %d in the file name", n)}
		}
		port = int32(n)
	}
	l, wd, err := p.listFile(rel, d, data)
	if err != nil {
		return rec, err
	}
	for _, a := range l.Addrs {
		k := verKey{a, port}
		if wd.Verified[k] == nil {
			wd.Verified[k] = &verifiedRecord{Source: rel}
		}
	}
	rec.Format, rec.Records = "verified-list", int64(l.Lines)
	if port == PortUnknown {
		rec.Detail = "port not recorded by the verifier (stored as port 0)"
	}
	rec.Detail = joinDetail(rec.Detail, listDetail(l))
	return rec, nil
}

// readZmapList reads a zmap port list (its date and port from its name) into the
// week's scan.
func (p *plan) readZmapList(rec fileRec, name string, data []byte) (fileRec, error) {
	rel := rec.Path
	m := reZmapList.FindStringSubmatch(name)
	d, err := fileDate(m[1])
	if err != nil {
		return rec, &FileError{Path: rel, Err: err}
	}
	n, _ := strconv.Atoi(m[2])
	if n > 65535 {
		return rec, &FileError{Path: rel, Err: malformed("port %d in the file name", n)}
	}
	l, wd, err := p.listFile(rel, d, data)
	if err != nil {
		return rec, err
	}
	wd.Scan[int32(n)] = l.Addrs
	wd.ScanFiles[int32(n)] = rel
	rec.Format, rec.Records, rec.Detail = "zmap-list", int64(l.Lines), listDetail(l)
	return rec, nil
}

// readCertCSV reads a certificate CSV (its week from the date in its name, if any).
func (p *plan) readCertCSV(rec fileRec, name string, data []byte) (fileRec, error) {
	rel := rec.Path
	recs, le := parseCertCSV(strings.NewReader(string(data)))
	if le != nil {
		return rec, lineFileError(rel, le)
	}
	c := certFile{Path: rel, Recs: recs}
	if m := reDate.FindStringSubmatch(name); m != nil {
		d, err := fileDate(m[1])
		if err != nil {
			return rec, &FileError{Path: rel, Err: err}
		}
		c.Week = runkey.Week(d)
	}
	p.certCSVs = append(p.certCSVs, c)
	rec.Format, rec.Records = "cert-csv", int64(len(recs))
	return rec, nil
}

// readLocationCSV reads the location CSV; an import takes one.
func (p *plan) readLocationCSV(rec fileRec, data []byte) (fileRec, error) {
	rel := rec.Path
	if p.locFile != "" {
		return rec, &FileError{Path: rel, Err: fmt.Errorf("a second location file (the first is %s): import them separately", p.locFile)}
	}
	locs, le := parseLocationCSV(strings.NewReader(string(data)))
	if le != nil {
		return rec, lineFileError(rel, le)
	}
	p.location, p.locFile = locs, rel
	rec.Format, rec.Records = "location-csv", int64(len(locs))
	return rec, nil
}

func listDetail(l addrList) string {
	var parts []string
	if l.Dropped > 0 {
		parts = append(parts, fmt.Sprintf("%d 0.0.0.0 line(s) dropped", l.Dropped))
	}
	if l.Dups > 0 {
		parts = append(parts, fmt.Sprintf("%d repeated address(es) dropped", l.Dups))
	}
	return strings.Join(parts, "; ")
}

func joinDetail(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// notImportedReason says why a file the directory holds has no table.
func notImportedReason(rel string) string {
	switch {
	case strings.HasPrefix(filepath.Base(rel), "53-count"):
		return "meaning not documented by its authors"
	case strings.Contains(rel, "lab_results/"):
		return "lab handshake durations (no resolver, no time): not a measurement of the population"
	case strings.HasSuffix(rel, ".qlog") || strings.Contains(rel, "qlog-sample"):
		return "qlog sample outside a measurement database (no measurement to attach it to)"
	}
	return "format not known to the importer"
}

// readSQLite reads a misc or performance database (told apart by their tables).
func (p *plan) readSQLite(ctx context.Context, path, rel string, rec fileRec) (fileRec, error) {
	if rec.Size == 0 {
		rec.Detail = "empty file"
		return rec, nil
	}
	db, err := openSQLite(path)
	if err != nil {
		return rec, &FileError{Path: rel, Err: err}
	}
	defer db.Close()
	tables, err := sqliteTables(ctx, db)
	if err != nil {
		return rec, &FileError{Path: rel, Err: err}
	}
	wrap := func(err error) error {
		var re *rowError
		if errors.As(err, &re) {
			return &FileError{Path: rel, Where: "table " + re.table + ", id " + re.id, Err: re.err}
		}
		return &FileError{Path: rel, Err: err}
	}
	switch {
	case len(tables) == 0:
		rec.Format, rec.Detail = "misc-sqlite", "no tables"
		return rec, nil
	case tables["dns_measurements"]:
		for _, t := range []string{"traceroutes", "q_log_outputs"} {
			if !tables[t] {
				return rec, &FileError{Path: rel, Err: malformed("performance database without table %s", t)}
			}
		}
		db2, n, err := readPerf(ctx, db)
		if err != nil {
			return rec, wrap(err)
		}
		p.perf = append(p.perf, perfFile{Path: rel, DB: db2})
		for _, m := range db2.Measurements {
			if m.Created.After(p.latest) {
				p.latest = m.Created
			}
		}
		rec.Format, rec.Records = "perf-sqlite", n
		if db2.OtherHops > 0 {
			rec.Detail = fmt.Sprintf("%d traceroute hops before the destination not stored (only the destination's RTT)", db2.OtherHops)
		}
		return rec, nil
	case tables["q_versions"]:
		for _, t := range miscTables {
			if !tables[t] {
				return rec, &FileError{Path: rel, Err: malformed("misc database without table %s", t)}
			}
		}
		m, n, err := readMisc(ctx, db)
		if err != nil {
			return rec, wrap(err)
		}
		mf := miscFile{Path: rel, DB: m}
		if dm := reDate.FindStringSubmatch(filepath.Base(rel)); dm != nil {
			d, err := fileDate(dm[1])
			if err != nil {
				return rec, &FileError{Path: rel, Err: err}
			}
			mf.Week = runkey.Week(d)
		} else if m.First != nil {
			mf.Week = runkey.Week(*m.First)
		}
		if mf.Week == "" && n > 0 {
			return rec, &FileError{Path: rel, Err: malformed("no date in the name and no created_at: cannot tell the week")}
		}
		if m.First != nil && m.First.After(p.latest) {
			p.latest = *m.First
		}
		p.misc = append(p.misc, mf)
		rec.Format, rec.Records = "misc-sqlite", n
		return rec, nil
	}
	return rec, &FileError{Path: rel, Err: malformed("SQLite database with neither the misc tables (q_versions, ...) nor the performance tables (dns_measurements, ...)")}
}
