package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Tool is a command made of subcommands ("zprobe scan", "dbctl retention", "testnet
// up"): the one way a doqscan tool dispatches them. Each subcommand has a name, a
// one-line summary, a flag set of its own (the common flags and those its Flags binds to
// the stage's configuration) and a --help of its own with examples. The command line is
//
//	tool [flags] SUBCOMMAND [flags] [ARG...]
//
// The flags before the subcommand are the subcommand's too ("testnet --vantages 2 up"
// is "testnet up --vantages 2"); without PassArgs they may also come between and after
// its arguments. Help: "tool", "tool --help" and "tool help" show the tool's help (the
// subcommands with their summaries); "tool help SUB", "tool SUB --help" and "tool
// --help SUB" the subcommand's. "tool --version" and "tool SUB --version" print the
// tool's version. A missing subcommand (without Default) or an unknown one is a usage
// error (exit code 2) whose line lists the subcommands; errors of the subcommand's run
// give the exit code of their type (ExitCode), as every command's.
type Tool struct {
	// Command is the tool's help: Name, Summary, Usage (default "NAME [flags]
	// SUBCOMMAND [flags] [ARG...]"), Examples, Notes, Locks. Its PassArgs is unused.
	Command
	Subcommands []Subcommand
	// Default names the subcommand that runs when the arguments are flags only
	// ("optout --listen :80" is "optout serve --listen :80"); "" means none.
	Default string
	// DefaultWithoutArgs: Default runs with no argument at all too ("optout" serves the
	// page); otherwise no argument is a usage error.
	DefaultWithoutArgs bool

	root string // the tool a Subcommand with subcommands of its own belongs to ("testnet")
}

// Subcommand is one subcommand of a Tool.
type Subcommand struct {
	Name    string
	Summary string // one line, in the tool's list of subcommands
	Usage   string // default "TOOL NAME [flags]"
	// Examples, Notes and Locks are the subcommand's --help (Command).
	Examples []string
	Notes    string
	Locks    string
	// PassArgs: the arguments from the subcommand's first positional one on go to its
	// run function unparsed, as Command.PassArgs ("testnet exec -- CMD...").
	PassArgs bool
	// Raw: every argument after the subcommand's name goes to its run function
	// unparsed, --help included: the run function parses them itself (an internal role
	// the tool re-executes itself for, "testnet delayline"). The run function gets the
	// common flags' defaults.
	Raw bool
	// Hidden leaves the subcommand out of the tool's list (an internal role).
	Hidden bool
	// Flags registers the subcommand's flags on fs, bound to the stage's configuration,
	// and returns what runs once they are parsed (with the positional arguments).
	Flags func(fs *flag.FlagSet) RunFunc
	// Subcommands are the subcommand's own ("testnet path set ADDR --loss 5%"): it is then
	// a Tool named "TOOL NAME" (Usage, Examples and Notes its help; Flags unused), and
	// the flags before its name belong to the subcommand that follows it ("testnet
	// --name x path show").
	Subcommands []Subcommand
}

// Main runs the tool with the process's arguments and exits with its exit code.
func (t *Tool) Main() { os.Exit(t.RunMain(os.Args[1:], os.Stderr)) }

// RunMain is Main without os.Exit, for tests: it runs args and returns the exit code.
// Help and what the subcommand prints go to stdout, errors and logs to stderr.
func (t *Tool) RunMain(args []string, stderr io.Writer) int {
	var common Common
	sub, before, after, err := t.split(args)
	switch {
	case err != nil:
		return execute(t.rootName(), flag.NewFlagSet(t.Name, flag.ContinueOnError), &common, nil, err, stderr, nil)
	case sub == nil && t.wantsVersion(before):
		fmt.Println(VersionLine(t.rootName()))
		return ExitOK
	case sub == nil: // a help form of the tool's own
		t.PrintHelp(os.Stdout)
		return ExitOK
	case len(sub.Subcommands) > 0:
		return t.nested(sub).RunMain(append(slices.Clip(before), after...), stderr)
	}
	fs := t.flagSet(sub, &common)
	run := sub.Flags(fs)
	if sub.Raw {
		return execute(t.rootName(), fs, &common, after, Parse(fs, before), stderr, run)
	}
	err = Parse(fs, before)
	var rest []string
	switch {
	case err != nil:
	case sub.PassArgs:
		rest, err = parsePassArgs(fs, &common, after)
	default:
		rest, err = ParseInterspersed(fs, after)
	}
	return execute(t.rootName(), fs, &common, rest, err, stderr, run)
}

// rootName is the name of the tool the version line names.
func (t *Tool) rootName() string {
	if t.root != "" {
		return t.root
	}
	return t.Name
}

// nested is subcommand s (with subcommands of its own) as a Tool.
func (t *Tool) nested(s *Subcommand) *Tool {
	return &Tool{Command: Command{Name: t.Name + " " + s.Name, Summary: s.Summary, Usage: s.Usage, Examples: s.Examples,
		Notes: s.Notes, Locks: s.Locks}, Subcommands: s.Subcommands, root: t.rootName()}
}

// PrintHelp writes the tool's help: its summary and usage, the subcommands with their
// summaries, the common flags, examples, notes, environment and exit codes.
func (t *Tool) PrintHelp(w io.Writer) {
	c := t.Command
	if c.Usage == "" {
		c.Usage = t.Name + " [flags] SUBCOMMAND [flags] [ARG...]"
	}
	c.subcommands = t.Subcommands
	var common Common
	fs := NewFlagSet(c, &common)
	PrintHelp(w, c, fs)
}

// SubcommandHelp writes the help of subcommand name, as "tool name --help" prints it.
func (t *Tool) SubcommandHelp(w io.Writer, name string) error {
	s := t.lookup(name)
	if s == nil {
		return t.unknown(name)
	}
	if len(s.Subcommands) > 0 {
		t.nested(s).PrintHelp(w)
		return nil
	}
	var common Common
	fs := t.flagSet(s, &common)
	s.Flags(fs)
	PrintHelp(w, t.subCommand(s), fs)
	return nil
}

// flagSet is subcommand s's flag set: the common flags, with s's help as its usage.
func (t *Tool) flagSet(s *Subcommand, common *Common) *flag.FlagSet {
	return NewFlagSet(t.subCommand(s), common)
}

// subCommand is the Command of subcommand s, for its help.
func (t *Tool) subCommand(s *Subcommand) Command {
	c := Command{Name: t.Name + " " + s.Name, Summary: s.Summary, Usage: s.Usage, Examples: s.Examples,
		Notes: s.Notes, Locks: s.Locks, tool: t.Name}
	if c.Usage == "" {
		c.Usage = c.Name + " [flags]"
	}
	return c
}

// printSubcommands lists the subcommands of tool (not the hidden ones) with their
// summaries, and how to get the help of each.
func printSubcommands(w io.Writer, tool string, subs []Subcommand) {
	width := 0
	for _, s := range subs {
		width = max(width, len(s.Name))
	}
	fmt.Fprintf(w, "\nSubcommands:\n")
	for _, s := range subs {
		if !s.Hidden {
			fmt.Fprintf(w, "  %-*s  %s\n", width, s.Name, s.Summary)
		}
	}
	fmt.Fprintf(w, "Use \"%s <subcommand> --help\" or \"%s help <subcommand>\" for a subcommand's flags and examples.\n", tool, tool)
}

// lookupSubs are the subcommands of subcommand name (none for an unknown one).
func (t *Tool) lookupSubs(name string) []Subcommand {
	if s := t.lookup(name); s != nil {
		return s.Subcommands
	}
	return nil
}

func (t *Tool) lookup(name string) *Subcommand {
	for i := range t.Subcommands {
		if t.Subcommands[i].Name == name {
			return &t.Subcommands[i]
		}
	}
	return nil
}

// names lists the subcommands that are not hidden: "scan, send, ingest".
func (t *Tool) names() string {
	var n []string
	for _, s := range t.Subcommands {
		if !s.Hidden {
			n = append(n, s.Name)
		}
	}
	return strings.Join(n, ", ")
}

func (t *Tool) unknown(name string) error {
	return Usagef("unknown subcommand %q: want %s (see %s --help)", name, t.names(), t.Name)
}

// split finds the subcommand in args: the first argument that is neither a flag nor a
// flag's value. It returns the subcommand (nil for a help form of the tool's own:
// "tool", "tool --help", "tool help", or "tool --version"), the arguments before it
// (flags) and after it. "tool help SUB" is "tool SUB --help".
func (t *Tool) split(args []string) (sub *Subcommand, before, after []string, err error) {
	i, help, err := t.findName(args)
	if err != nil {
		return nil, nil, nil, err
	}
	if i == len(args) { // flags only, or nothing
		switch {
		case help, t.wantsVersion(args):
			return nil, args, nil, nil
		case t.Default != "" && (len(args) > 0 || t.DefaultWithoutArgs):
			return t.lookup(t.Default), args, nil, nil
		}
		return nil, nil, nil, Usagef("want a subcommand: %s (see %s --help)", t.names(), t.Name)
	}
	before, name, after := args[:i], args[i], args[i+1:]
	if n := len(before); n > 0 && before[n-1] == "--" {
		before = before[:n-1]
	}
	if name == "help" && t.lookup("help") == nil {
		switch {
		case len(after) == 0:
			return nil, nil, nil, nil
		case len(after) > 1 && len(t.lookupSubs(after[0])) == 0:
			return nil, nil, nil, Usagef("help takes one subcommand, got %q", strings.Join(after, " "))
		}
		name, after = after[0], append(slices.Clone(after[1:]), "--help") // "help path set": "path set --help"
	}
	if sub = t.lookup(name); sub == nil {
		return nil, nil, nil, t.unknown(name)
	}
	if help {
		after = append([]string{"--help"}, after...) // "tool --help SUB" is "tool SUB --help"
	}
	return sub, before, after, nil
}

// findName returns the index of the subcommand's name in args (len(args) if there is
// none) and whether a -h/--help came before it. A flag before the name takes a value
// unless it is a boolean flag of the common ones or of a subcommand; a flag that no
// subcommand has is a usage error.
func (t *Tool) findName(args []string) (int, bool, error) {
	var known *flag.FlagSet // every flag of every subcommand, built when a flag comes first
	help := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return min(i+1, len(args)), help, nil
		case len(a) < 2 || a[0] != '-':
			return i, help, nil
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		name, _, hasValue := strings.Cut(name, "=")
		if name == "h" || name == "help" {
			help = true
			continue
		}
		if known == nil {
			known = t.allFlags()
		}
		f := known.Lookup(name)
		if f == nil {
			return 0, false, Usagef("flag provided but not defined: -%s (see %s --help)", name, t.Name)
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
			i++ // its value
		}
	}
	return len(args), help, nil
}

// allFlags is a flag set with the common flags and every flag of every subcommand
// (their first registration), for findName to tell flags with values from boolean ones.
// Registering binds the flags to their defaults, which the chosen subcommand's Flags
// binds again before its arguments are parsed.
func (t *Tool) allFlags() *flag.FlagSet {
	var common Common
	all := NewFlagSet(t.Command, &common)
	add := func(fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) {
			if all.Lookup(f.Name) == nil {
				all.Var(f.Value, f.Name, f.Usage)
			}
		})
	}
	for i := range t.Subcommands {
		s := &t.Subcommands[i]
		switch {
		case s.Raw:
		case len(s.Subcommands) > 0:
			add(t.nested(s).allFlags())
		default:
			var c Common
			fs := t.flagSet(s, &c)
			s.Flags(fs)
			add(fs)
		}
	}
	return all
}

// wantsVersion says whether args (flags only) ask for the version.
func (t *Tool) wantsVersion(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-version" || a == "--version" || a == "-version=true" || a == "--version=true" {
			return true
		}
	}
	return false
}
