// Package command is cmd/testnet's subcommands (up, down, status, exec, path and the
// hidden delayline): Tool binds each one's flags to Flags and runs it.
package command

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/delayline"
	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// Cmd is testnet's help.
var Cmd = cli.Command{
	Name:    "testnet",
	Summary: "the simulated internet: network namespaces, delay line, simulated and third-party servers",
	Usage:   "testnet [flags] up|down|status|exec [-- CMD...]|path set ADDR --loss P|path show|path reset",
	Examples: []string{
		"testnet up                          # instance dq with testbed/population.txt",
		"testnet --vantages 2 up             # with a second vantage point (another instance: --name NAME)",
		"testnet --vantages 3 --db up        # three vantage points and a central database behind the delay line",
		"testnet status",
		"testnet exec -- ping -c3 198.19.0.1",
		"testnet --vantage 1 exec -- ip route",
		"testnet path set 198.19.3.7 --loss 5%   # 5 % loss each way on that path, now",
		"testnet path set 198.19.3.0/24 --rtt 80ms --jitter 1ms",
		"testnet path show",
		"testnet path reset                  # back to the population's paths",
		"testnet down",
	},
	Notes: `Namespaces: <name>-vantage (198.18.0.2), <name>-vantage2 (198.18.1.2), ..., <name>-router
(the delay line on tun0), <name>-inet (all of 198.19.0.0/16). Nothing routes outside
198.18.0.0/15. State, pid files and logs: <project>/var/testnet/<name>/. Needs root.
DOQSCAN_TESTNET sets the default instance name (--name). See docs/testbed.md.

"testnet delayline --table FILE" runs the delay line itself (up starts it in the router).`,
}

// execNotes and pathNotes are the helps of exec and path.
const (
	execNotes = `SIGINT, SIGTERM and SIGHUP are forwarded to the command, testnet waits for it and exits
with its exit code (130 when a doqscan tool was interrupted); if testnet itself is killed,
the command gets SIGTERM. Exit 5 when the instance has no such vantage namespace.`
	pathNotes = `Run-time overrides of the delay line's path profiles (per direction; attributes not given
keep their value), in effect when the command returns, lost when the delay line restarts.
Loss takes a percentage ("5%") or a probability ("0.05"). Exit 2 for a refused request,
5 when the instance's delay line is not running.`
)

// Flags are testnet's flags: the testbed's Options and what the subcommands add.
type Flags struct {
	Options   testbed.Options
	NoServers bool // up: namespaces and the delay line only
	Vantage   int  // exec: vantage index
	JSON      bool // status: print JSON
}

// registerName binds --name, which every subcommand takes.
func (f *Flags) registerName(fs *flag.FlagSet) {
	fs.StringVar(&f.Options.Name, "name", "", "instance name (default $"+netns.EnvInstance+", else "+netns.DefaultInstance+")")
}

// registerUp binds up's flags: the testbed's options.
func (f *Flags) registerUp(fs *flag.FlagSet) {
	o := &f.Options
	f.registerName(fs)
	cli.IntVar(fs, &o.Vantages, "vantages", 1, 1, netns.MaxVantages, "number of vantage namespaces")
	fs.BoolVar(&o.DB, "db", false, "a central database for the vantage points in <name>-db (198.18.254.2, TLS; docs/fleet.md)")
	fs.StringVar(&o.Population, "population", "", "population file (default testbed/population.txt)")
	fs.BoolVar(&f.NoServers, "no-servers", false, "start only namespaces and the delay line")
	fs.BoolVar(&o.NoPeers, "no-peers", false, "start bin/simserver but not the third-party peers")
	cli.Uint64Var(fs, &o.Seed, "seed", 1, 0, math.MaxUint64, "delay-line loss/jitter RNG seed")
	cli.DurationVar(fs, &o.Lead, "lead", 0, -time.Second, time.Second, "delay-line release lead (0: the default 100us, negative: none)")
}

// Validate checks the flags' ranges (usage errors, exit code 2).
func (f *Flags) Validate() error {
	return cli.FirstError(
		cli.InRange("vantages", f.Options.Vantages, 1, netns.MaxVantages),
		cli.InRange("vantage", f.Vantage, 0, netns.MaxVantages-1),
	)
}

// options are the testbed's Options for a subcommand: the flags' checked, logging to
// log, after the testbed's preflight (root, ip, the TUN device: exit code 5).
func (f *Flags) options(log *slog.Logger) (testbed.Options, error) {
	if err := f.Validate(); err != nil {
		return testbed.Options{}, err
	}
	o := f.Options
	o.Log = log
	o.Servers = !f.NoServers
	if err := testbed.Preflight(); err != nil {
		return o, cli.Environmentf("%v", err)
	}
	return o, nil
}

// Tool is testnet: its subcommands, their flags bound to a Flags (Options.Vantages 1
// unless up's --vantages); stdout takes what they print.
func Tool(stdout io.Writer) *cli.Tool {
	f := Flags{Options: testbed.Options{Vantages: 1, Seed: 1}}
	// run is a subcommand's run function: its Options, then fn, with no argument.
	run := func(name string, fn func(ctx context.Context, o testbed.Options) error) cli.RunFunc {
		return func(ctx context.Context, log *slog.Logger, args []string) error {
			if len(args) != 0 {
				return cli.Usagef("%s takes no arguments", name)
			}
			o, err := f.options(log)
			if err != nil {
				return err
			}
			return fn(ctx, o)
		}
	}
	return &cli.Tool{Command: Cmd, Subcommands: []cli.Subcommand{
		{Name: "up", Summary: "start (or reuse) an instance: namespaces, delay line, simserver and the peers",
			Examples: []string{"testnet up", "testnet --vantages 2 up", "testnet --vantages 3 --db up"},
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				f.registerUp(fs)
				return run("up", func(ctx context.Context, o testbed.Options) error { return up(ctx, o, stdout) })
			}},
		{Name: "down", Summary: "stop an instance and remove its namespaces",
			Examples: []string{"testnet down"},
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				f.registerName(fs)
				return run("down", testbed.Down)
			}},
		{Name: "status", Summary: "the instance's namespaces, processes and delay-line counters (exit 1 if not healthy)",
			Usage:    "testnet status [--name NAME] [--json]",
			Examples: []string{"testnet status"},
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				f.registerName(fs)
				fs.BoolVar(&f.JSON, "json", false, "print JSON")
				return run("status", func(ctx context.Context, o testbed.Options) error { return status(ctx, o, f.JSON, stdout) })
			}},
		{Name: "exec", Summary: "run a command inside a vantage namespace, with its exit code",
			Usage: "testnet exec [--name NAME] [--vantage N] -- CMD [ARG...]", Notes: execNotes, PassArgs: true,
			Examples: []string{"testnet exec -- ping -c3 198.19.0.1", "testnet --vantage 1 exec -- ip route"},
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				f.registerName(fs)
				cli.IntVar(fs, &f.Vantage, "vantage", 0, 0, netns.MaxVantages-1, "vantage index (0 = <name>-vantage)")
				return func(ctx context.Context, log *slog.Logger, argv []string) error {
					if _, err := f.options(log); err != nil {
						return err
					}
					return execIn(ctx, f, argv)
				}
			}},
		{Name: "path", Summary: "set, show or reset the delay line's path profiles at run time",
			Usage: "testnet path set ADDR|PREFIX [--loss P] [--rtt D] [--jitter D] | path show | path reset [ADDR|PREFIX]",
			Notes: pathNotes,
			Examples: []string{"testnet path set 198.19.3.7 --loss 5%", "testnet path set 198.19.3.0/24 --rtt 80ms --jitter 1ms",
				"testnet path show", "testnet path reset"},
			Subcommands: []cli.Subcommand{
				{Name: "set", Summary: "override the path profile of an address or prefix (each direction)",
					Usage: "testnet path set ADDR|PREFIX [--loss P] [--rtt D] [--jitter D]", Notes: pathNotes,
					Examples: []string{"testnet path set 198.19.3.7 --loss 5%", "testnet path set 198.19.3.0/24 --rtt 80ms --jitter 1ms"},
					Flags: func(fs *flag.FlagSet) cli.RunFunc {
						f.registerName(fs)
						loss := fs.String("loss", "", `loss each way: a percentage ("5%") or a probability ("0.05")`)
						rtt := fs.String("rtt", "", `round-trip time ("30ms")`)
						jitter := fs.String("jitter", "", `jitter ("1ms")`)
						return pathRun(&f, stdout, 1, 1, func(args []string) (string, error) {
							return testbed.PathSetRequest(args[0], *loss, *rtt, *jitter)
						})
					}},
				{Name: "show", Summary: "print the path profiles in effect, overrides included",
					Examples: []string{"testnet path show"},
					Flags: func(fs *flag.FlagSet) cli.RunFunc {
						f.registerName(fs)
						return pathRun(&f, stdout, 0, 0, func([]string) (string, error) { return "show", nil })
					}},
				{Name: "reset", Summary: "drop the override of an address or prefix, or every override",
					Usage: "testnet path reset [ADDR|PREFIX]", Examples: []string{"testnet path reset"},
					Flags: func(fs *flag.FlagSet) cli.RunFunc {
						f.registerName(fs)
						return pathRun(&f, stdout, 0, 1, func(args []string) (string, error) {
							return strings.TrimSpace("reset " + strings.Join(args, " ")), nil
						})
					}},
			}},
		// The delay line has its own flags (testbed.DelayLineMain); up starts it this way
		// in the router namespace.
		{Name: "delayline", Summary: "run the delay line (up starts it in the router namespace)", Hidden: true, Raw: true,
			Flags: func(*flag.FlagSet) cli.RunFunc {
				return func(_ context.Context, _ *slog.Logger, args []string) error {
					if code := testbed.DelayLineMain(args); code != cli.ExitOK {
						return &cli.ExitError{Code: code, Err: errors.New("delay line failed")}
					}
					return nil
				}
			}},
	}}
}

func up(ctx context.Context, o testbed.Options, stdout io.Writer) error {
	tb, err := testbed.Ensure(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "testbed %s up (state %s)\n", tb.Name, tb.State)
	if tb.PeersMissing != "" {
		fmt.Fprintf(stdout, "NOTE: %s\n", tb.PeersMissing)
	}
	return nil
}

func status(ctx context.Context, o testbed.Options, asJSON bool, stdout io.Writer) error {
	st, err := testbed.GetStatus(ctx, o)
	if err != nil {
		return err
	}
	printStatus(stdout, st, asJSON)
	if !st.Healthy {
		return errors.New("testbed " + st.Name + " is not healthy")
	}
	return nil
}

// pathRun is the run function of a `testnet path` subcommand: it takes from min to max
// arguments, builds the delay-line control request with request and sends it to the
// instance's delay line, printing the answer.
func pathRun(f *Flags, stdout io.Writer, minArgs, maxArgs int, request func(args []string) (string, error)) cli.RunFunc {
	return func(ctx context.Context, log *slog.Logger, args []string) error {
		switch {
		case len(args) > maxArgs && maxArgs == 0:
			return cli.Usagef("takes no arguments, got %q", strings.Join(args, " "))
		case len(args) < minArgs || len(args) > maxArgs:
			return cli.Usagef("want %s address or prefix, got %q (see --help)", map[bool]string{true: "one", false: "at most one"}[minArgs == 1],
				strings.Join(args, " "))
		}
		req, err := request(args)
		if err != nil {
			return cli.Usagef("%v", err)
		}
		if _, err := f.options(log); err != nil {
			return err
		}
		name := instanceName(f.Options.Name)
		ans, err := testbed.PathControl(ctx, home.Dir(), name, req)
		switch {
		case errors.Is(err, delayline.ErrControl):
			return cli.Usagef("%v", err)
		case err != nil:
			return cli.Environmentf("testbed %s: %v (is it up? `testnet up`)", name, err)
		}
		fmt.Fprintln(stdout, ans)
		return nil
	}
}

// execIn runs argv in the vantage namespace f.Vantage of the instance, forwarding
// signals, and exits with the command's code.
func execIn(ctx context.Context, f Flags, argv []string) error {
	if len(argv) == 0 {
		return cli.Usagef("exec needs a command after --")
	}
	name := instanceName(f.Options.Name)
	in := netns.Instance{Name: name, Vantages: f.Vantage + 1}
	// The namespace must be there: `ip netns exec` of a missing one exits 255, which
	// read as the command's own exit code.
	all, err := netns.Runner{}.ListNamespaces(ctx)
	if err != nil {
		return cli.Environmentf("list the network namespaces: %v", err)
	}
	if !slices.Contains(all, in.Vantage(f.Vantage)) {
		return cli.Environmentf("testbed %s has no vantage namespace %s (is it up? `testnet --name %s --vantages %d up`)",
			name, in.Vantage(f.Vantage), name, f.Vantage+1)
	}
	c := netns.Command(in.Vantage(f.Vantage), argv...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = append(os.Environ(), netns.EnvInstance+"="+name)
	return cli.RunChild(ctx, c) // signals forwarded; exits with the command's code
}

// instanceName is the instance a subcommand acts on: --name, else $DOQSCAN_TESTNET, else
// the default.
func instanceName(flagName string) string {
	if flagName != "" {
		return flagName
	}
	if n := os.Getenv(netns.EnvInstance); n != "" {
		return n
	}
	return netns.DefaultInstance
}

func printStatus(w io.Writer, st *testbed.Status, asJSON bool) {
	if asJSON {
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintf(w, "testbed %s: healthy=%v routes=%s\n", st.Name, st.Healthy, st.RouteCheck)
	for ns, ok := range st.Namespaces {
		fmt.Fprintf(w, "  namespace %-24s %s\n", ns, map[bool]string{true: "present", false: "MISSING"}[ok])
	}
	for _, p := range st.Processes {
		name := p.Name
		if p.Binary != "" {
			name += " (" + p.Binary + ")"
		}
		fmt.Fprintf(w, "  %-10s pid %-7d in %-20s %s\n", name, p.Pid, p.Namespace, map[bool]string{true: "running", false: "NOT RUNNING"}[p.Alive])
	}
	if d := st.DelayLine; d != nil {
		fmt.Fprintf(w, "  delay line: received %d forwarded %d lost %d dropped %d in-flight %d; late mean %.1f µs max %.1f µs, >100 µs %d; %d queue(s), %d wake-ups\n",
			d.Received, d.Forwarded, d.Lost, d.Dropped, d.InFlight, float64(d.LateMeanNS)/1e3, float64(d.LateMaxNS)/1e3, d.LateOver, d.Queues, d.Wakeups)
	}
}
