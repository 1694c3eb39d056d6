package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/protocol"
	"github.com/doqscan/doqscan/internal/provenance"
)

// VersionLine is what --version prints: the tool, the release, the VCS revision (or
// "unknown" for a build without it) and the Go version.
func VersionLine(tool string) string {
	return tool + " " + provenance.ReadBuild().String()
}

// Names every tool gives the same idea (one flag name and one environment variable each).
const (
	// EnvVantage names the vantage point when --vantage is not given (every tool).
	EnvVantage = "DOQSCAN_VANTAGE"
	// EnvVantageLocation and EnvVantageContact give the defaults of --vantage-location
	// and --vantage-contact.
	EnvVantageLocation = "DOQSCAN_VANTAGE_LOCATION"
	EnvVantageContact  = "DOQSCAN_VANTAGE_CONTACT"
	// DefaultVantageID is the vantage point of a tool run without --vantage or
	// DOQSCAN_VANTAGE.
	DefaultVantageID = "local"
)

// DefaultVantage is $DOQSCAN_VANTAGE, else DefaultVantageID.
func DefaultVantage() string {
	if v := os.Getenv(EnvVantage); v != "" {
		return v
	}
	return DefaultVantageID
}

// VantageFlags are --vantage, --vantage-location and --vantage-contact, the same in
// every tool that writes runs.
type VantageFlags struct {
	ID, Location, Contact string
}

// Register adds the flags to fs, with their defaults from the environment.
func (v *VantageFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&v.ID, "vantage", DefaultVantage(), "vantage point id (env "+EnvVantage+"; default "+DefaultVantageID+")")
	fs.StringVar(&v.Location, "vantage-location", os.Getenv(EnvVantageLocation),
		"where the vantage point is (free text, e.g. \"Frankfurt, DE, AS64500\"); stored in vantage_points and every run's provenance (env "+EnvVantageLocation+")")
	fs.StringVar(&v.Contact, "vantage-contact", os.Getenv(EnvVantageContact),
		"who answers for the vantage point (e.g. an abuse email); stored like --vantage-location (env "+EnvVantageContact+")")
}

// Provenance is the vantage point as provenance records it.
func (v VantageFlags) Provenance() provenance.Vantage {
	return provenance.Vantage{ID: v.ID, Location: v.Location, Contact: v.Contact}
}

// DefaultBlocklistDir is the default of every tool's --blocklist-dir (blocklist.DefaultDir:
// $DOQSCAN_HOME/blocklist, else the blocklist/ of the checkout the binary or the current
// directory is in, else ./blocklist). It is returned even when it does not exist: the
// tool then stops with exit code 5 instead of running without the operator's exclusions.
func DefaultBlocklistDir() string { return blocklist.DefaultDir() }

// TargetsHelp is the --help paragraph of a --targets file, the grammar verify and
// measure share (internal/listfile, Targets); its protocols and default ports are
// internal/protocol's.
var TargetsHelp = `Targets file (--targets, - = stdin): one resolver per line, "ADDRESS[:PORT] [sni=NAME] [PROTOCOL=PORT[/ALPN] ...]",
'#' comments: 198.19.0.7, 198.19.0.7:784, [2001:2::7]:8853, 198.19.0.7 sni=dns.example doq=784/doq-i02 dot=853.
The port after the address is a DoQ port (as doq=PORT); PROTOCOL is ` + protocol.List(protocol.Names(), "or") + `,
ALPN a DoQ ALPN (default doq). verify verifies a line's DoQ endpoints, DoQ on 853 when it names none
(a bare address means port 853); measure measures every protocol, on its default port where the line names
none (` + protocol.DefaultPortsText(true) + `). A resolver on several lines is one target.`

// deprecated is an old flag name kept working: it sets the new flag's value.
type deprecated struct {
	flag.Value
	old, new string
}

// String is the new flag's value. The zero deprecated (no flag behind it) is "": the
// flag package calls String on a zero value of the type to decide whether --help
// prints a default, and the embedded nil Value must not be called then.
func (d *deprecated) String() string {
	if d == nil || d.Value == nil {
		return ""
	}
	return d.Value.String()
}

// Deprecate registers old as a deprecated spelling of the flag named new (already in
// fs): it sets the same value, its help says which name to use, and WarnDeprecated logs
// a warning when a run used it.
func Deprecate(fs *flag.FlagSet, old, new string) {
	f := fs.Lookup(new)
	if f == nil {
		panic(fmt.Sprintf("cli.Deprecate: no flag --%s", new))
	}
	fs.Var(&deprecated{Value: f.Value, old: old, new: new}, old, "deprecated: use --"+new)
}

// WarnDeprecated logs one warning per deprecated flag name that was set in fs.
func WarnDeprecated(log *slog.Logger, fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		if d, ok := f.Value.(*deprecated); ok {
			log.Warn("deprecated flag: use --"+d.new+" (the old name will be removed)", "flag", "--"+d.old, "use", "--"+d.new)
		}
	})
}

// CheckBlocklistDir refuses to run without the operator's blocklist directory: "" is a
// usage error (exit 2), a missing directory or a file in its place a missing
// prerequisite (exit 5). flagName names the flag in the message.
func CheckBlocklistDir(flagName, dir string) error {
	if dir == "" {
		return Usagef("--%s is empty: name the directory of the blocklist *.conf files (default %s)", flagName, DefaultBlocklistDir())
	}
	st, err := os.Stat(dir)
	if err != nil {
		return Environmentf("--%s: blocklist directory %s: %w (create it, set DOQSCAN_HOME to the installation, or pass --%s)", flagName, dir, err, flagName)
	}
	if !st.IsDir() {
		return Environmentf("--%s: %s is not a directory", flagName, dir)
	}
	return nil
}

// SplitList splits a comma-separated flag value into its items, trimmed, empty ones
// dropped ("doq, doh,," is doq and doh).
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
