// Package cli is what every doqscan command shares: exit codes, logging, --help with
// examples, signal handling and opening the store. Mains stay thin: they declare flags
// and call one run function through Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/pgcluster"
)

// Exit codes shared by every doqscan command (documented in README.md).
const (
	ExitOK          = 0   // done; every target has a classified outcome
	ExitFailure     = 1   // the run failed (details logged)
	ExitUsage       = 2   // bad flags or arguments
	ExitDatabase    = 3   // database unreachable or bad DATABASE_URL
	ExitSchema      = 4   // database schema newer than this binary
	ExitEnvironment = 5   // missing prerequisite (zmap, root, testbed, files)
	ExitInterrupted = 130 // stopped by SIGINT/SIGTERM; what was measured is stored
	// ExitLocked (sysexits EX_TEMPFAIL): another run of the same unit (a scan's week and
	// shard, a verification run, a measurement round, a jobrun job) holds its lock
	// (store.ErrLocked); nothing was done. Units treat it as success.
	ExitLocked = 75
)

// ExitError carries an exit code with an error.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Usagef returns a usage error (exit code 2).
func Usagef(format string, a ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, a...)}
}

// Environmentf returns a missing-prerequisite error (exit code 5).
func Environmentf(format string, a ...any) error {
	return &ExitError{Code: ExitEnvironment, Err: fmt.Errorf(format, a...)}
}

// InRange returns a usage error naming the flag unless lo <= v <= hi (NaN is out of
// every range).
func InRange[T ~int | ~int32 | ~int64 | ~float64](flag string, v, lo, hi T) error {
	if !(v >= lo && v <= hi) {
		return Usagef("--%s %v is out of range: want %v..%v", flag, v, lo, hi)
	}
	return nil
}

// FirstError returns the first non-nil error of errs (a list of checks).
func FirstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ExitCode maps an error to the exit code it means, from its type: an *ExitError's
// code, a list file's bad line (2) or missing file (5), the store's sentinels,
// cancellation; anything else is a failed run.
func ExitCode(err error) int {
	var (
		ee      *ExitError
		ce      *ChildExitError
		lineErr *listfile.LineError
		openErr *listfile.OpenError
	)
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return ExitOK
	case errors.As(err, &ee):
		return ee.Code
	case errors.As(err, &ce):
		return ce.Code // a wrapper exits as its child did
	case errors.As(err, new(*labnet.RefusedError)):
		return ExitEnvironment // lab addresses need the testbed
	case errors.As(err, &lineErr):
		return ExitUsage
	case errors.As(err, &openErr):
		return ExitEnvironment
	case errors.Is(err, store.ErrLocked):
		return ExitLocked
	case errors.Is(err, store.ErrSchemaNewer):
		return ExitSchema
	case errors.Is(err, store.ErrUnavailable):
		return ExitDatabase
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	}
	return ExitFailure
}

// Command describes a command for --help.
type Command struct {
	Name     string // e.g. "zprobe"
	Summary  string // one line
	Usage    string // e.g. "zprobe [flags]"
	Examples []string
	Notes    string // extra paragraphs after the flags
	// PassArgs says the arguments from the first positional one on belong to the run
	// function, unparsed: they hold flags of their own ("jobrun --job x -- measure
	// --hour H"). A --help or --version among them (before any "--") is still the
	// tool's. Without PassArgs, flags may come before, between and after the positional
	// arguments ("dnsbench dot://127.0.0.1:8853 --json"), up to a "--". A tool made of
	// subcommands is a Tool (tool.go), never a Command whose run function reads
	// args[0].
	PassArgs bool
	// Locks names the unit of work whose lock the command takes, with its key ("a
	// measurement round (vantage, label, hour)"); the help then lists exit code 75.
	Locks string

	subcommands []Subcommand // a Tool's, listed after the usage (Tool.PrintHelp)
	tool        string       // a subcommand's tool: its help points back to "tool help"
}

// Common flags every command has.
type Common struct {
	LogLevel  string
	LogFormat string
	Version   bool

	passArgs bool // Command.PassArgs of the flag set's command
}

// NewFlagSet returns a flag set whose --help prints the summary, usage, flags, examples
// and exit codes, with the common flags registered.
func NewFlagSet(c Command, common *Common) *flag.FlagSet {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.StringVar(&common.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&common.LogFormat, "log-format", "text", "log format: text or json (structured, to stderr)")
	fs.BoolVar(&common.Version, "version", false, "print the version and exit")
	common.passArgs = c.PassArgs
	fs.Usage = func() { PrintHelp(fs.Output(), c, fs) }
	return fs
}

// PrintHelp writes the full help text of a command.
func PrintHelp(w io.Writer, c Command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s: %s\n\nUsage:\n  %s\n", c.Name, c.Summary, c.Usage)
	if len(c.subcommands) > 0 {
		printSubcommands(w, c.Name, c.subcommands)
	}
	fmt.Fprintf(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	if len(c.Examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range c.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	if c.Notes != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.Notes))
	}
	if c.tool != "" {
		fmt.Fprintf(w, "\nSee %q for the other subcommands.\n", c.tool+" help")
	}
	fmt.Fprintf(w, "\nEnvironment:\n  DATABASE_URL  PostgreSQL URL; unset: a private cluster under <project>/var/postgres is started or reused\n")
	if fs.Lookup("vantage") != nil && fs.Lookup("vantage-location") != nil {
		fmt.Fprintf(w, "  %-14s default --vantage (else %q); %s, %s: default --vantage-location, --vantage-contact\n",
			EnvVantage, DefaultVantageID, EnvVantageLocation, EnvVantageContact)
	}
	if fs.Lookup("blocklist-dir") != nil {
		fmt.Fprintf(w, "  DOQSCAN_HOME  the installation; --blocklist-dir defaults to its blocklist/\n")
	}
	fmt.Fprintf(w, "\nExit codes:\n  0 ok, 1 run failed, 2 bad usage, 3 database unavailable, 4 database schema newer than binary,\n  5 missing prerequisite, 130 interrupted (measured rows are kept)\n")
	if c.Locks != "" {
		fmt.Fprintf(w, "  %d another run of %s holds its lock: nothing done\n", ExitLocked, c.Locks)
	}
}

// Parse parses args; --help exits 0 after printing help, a bad flag returns a usage error.
func Parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return ErrHelp
	}
	if err != nil {
		if fe := refused(fs); fe != nil {
			err = fe // the numeric flag's own error, by type (numflag.go)
		}
		return Usagef("%v (see --help)", err)
	}
	return nil
}

// ParseInterspersed parses flags wherever they are among the arguments, as GNU getopt
// does: "dnsbench dot://127.0.0.1:8853 --json" is "dnsbench --json dot://...". It
// returns the positional arguments in their order; everything after a "--" is
// positional. Errors are Parse's (a usage error, or ErrHelp after printing --help).
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := Parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil // the flag parser took the "--"
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// afterArgument says whether one of names (flag spellings: "-h", "--help", ...) follows a
// positional argument of a command with Command.PassArgs ("testnet up --help"):
// parsing stopped at the argument, so the flag package never saw it, and the command
// would run instead of showing its help or version. Arguments after a "--" belong to a
// command being wrapped ("testnet exec -- dig --help", "jobrun --job x -- measure
// --help") and are left alone.
func afterArgument(all, rest []string, names ...string) bool {
	if n := len(all) - len(rest); n > 0 && all[n-1] == "--" {
		return false // the flag parser took the "--": everything left follows it
	}
	for _, a := range rest {
		if a == "--" {
			return false
		}
		if slices.Contains(names, a) {
			return true
		}
	}
	return false
}

// ErrHelp is what Parse returns after printing --help; it means exit code 0.
var ErrHelp = errors.New("help shown")

// NewLogger builds the slog logger the common flags ask for.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, Usagef("bad --log-level %q: %v", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, Usagef("bad --log-format %q: want text or json", format)
}

// RunFunc is what a command runs once its flags are parsed: Main passes it a context
// cancelled on SIGINT/SIGTERM, the logger the common flags ask for and the arguments
// left after the flags.
type RunFunc = func(ctx context.Context, log *slog.Logger, args []string) error

// Main runs a command: parses flags with fs, sets up logging and a context cancelled on
// SIGINT/SIGTERM, calls run, prints one error line and exits with the matching code.
func Main(fs *flag.FlagSet, common *Common, run RunFunc) {
	os.Exit(RunMain(fs, common, os.Args[1:], os.Stderr, run))
}

// RunMain is Main without os.Exit, for tests.
func RunMain(fs *flag.FlagSet, common *Common, args []string, stderr io.Writer, run RunFunc) int {
	var err error
	if common.passArgs {
		args, err = parsePassArgs(fs, common, args)
	} else {
		args, err = ParseInterspersed(fs, args)
	}
	return execute(fs.Name(), fs, common, args, err, stderr, run)
}

// parsePassArgs parses the flags up to the first positional argument and returns the
// arguments from there on, unparsed (Command.PassArgs); a --help or --version among
// them before any "--" is still the command's.
func parsePassArgs(fs *flag.FlagSet, common *Common, args []string) ([]string, error) {
	if err := Parse(fs, args); err != nil {
		return nil, err
	}
	switch {
	case afterArgument(args, fs.Args(), "-h", "-help", "--help"):
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return nil, ErrHelp
	case afterArgument(args, fs.Args(), "-version", "--version"):
		common.Version = true
	}
	return fs.Args(), nil
}

// execute finishes what RunMain and Tool.RunMain start once the flags are parsed (parseErr
// is the parse's error): it prints the error or the version of tool, or sets up logging
// and a context cancelled on SIGINT/SIGTERM, calls run with args, prints one error line
// and returns the matching exit code.
func execute(tool string, fs *flag.FlagSet, common *Common, args []string, parseErr error, stderr io.Writer, run RunFunc) int {
	if parseErr != nil {
		if errors.Is(parseErr, ErrHelp) {
			return ExitOK
		}
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), parseErr)
		return ExitCode(parseErr)
	}
	if common.Version {
		fmt.Println(VersionLine(tool))
		return ExitOK
	}
	log, err := NewLogger(stderr, common.LogLevel, common.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return ExitCode(err)
	}
	WarnDeprecated(log, fs)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			cancel(&Interrupted{Signal: s})
		case <-ctx.Done():
		}
	}()
	err = run(ctx, log, args)
	if err != nil && !errors.Is(err, ErrHelp) {
		var ce *ChildExitError
		if ctx.Err() != nil && !errors.Is(err, context.Canceled) && !errors.As(err, &ce) {
			err = fmt.Errorf("%w (%v)", context.Canceled, err)
		}
		fmt.Fprintf(stderr, "%s: error: %v\n", fs.Name(), err)
	}
	return ExitCode(err)
}

// OpenStore opens DATABASE_URL, or when it is unset, starts (or reuses) the private
// cluster and says where it is. The schema is applied either way. Every connection has
// a connect timeout and a statement timeout (store.ParseConfig); while the server does
// not answer, a "waiting for database" line is logged, and one that never answers gives
// an error wrapping store.ErrUnavailable (exit code 3) after the connect timeout.
func OpenStore(ctx context.Context, log *slog.Logger) (*store.Store, error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		c, err := pgcluster.Default()
		if err != nil {
			return nil, &ExitError{Code: ExitDatabase, Err: err}
		}
		var started bool
		url, started, err = c.Ensure(ctx)
		if err != nil {
			return nil, &ExitError{Code: ExitDatabase, Err: err}
		}
		log.Info("using the private PostgreSQL cluster (set DATABASE_URL to use another)",
			"data", c.DataDir(), "socket", c.SocketDir(), "started", started, "url", url)
	}
	s, err := store.OpenLogged(ctx, url, log)
	if err != nil {
		return nil, err
	}
	return s, nil
}
