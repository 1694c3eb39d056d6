// Package command is cmd/optout's flag handling: one function per subcommand (serve,
// list, accept, reject, withdraw) that parses its flags and calls internal/optout.
package command

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/optout"
	"github.com/doqscan/doqscan/internal/release/manifest"
	"github.com/doqscan/doqscan/internal/store"
)

// IO is where a subcommand writes its output (errors and logs go to the tool's stderr).
type IO struct {
	Out io.Writer
}

// Tool is optout: serve (the default when the arguments are flags or none: "optout
// --listen :80" is what the systemd unit runs), list, accept, reject and withdraw, each
// with its flags.
func Tool(io IO) *cli.Tool {
	decision := func(verb, action, summary, usage string) cli.Subcommand {
		return cli.Subcommand{Name: verb, Summary: summary, Usage: usage, Notes: notes,
			Examples: []string{
				"optout " + verb + " 42 --reason 'confirmed by phone with the AS contact'",
				"optout " + verb + " 42 --actor alice --reason 'asked by the AS contact' --blocklist-dir blocklist"},
			Flags: decider(io, action)}
	}
	return &cli.Tool{Command: Cmd, Default: "serve", DefaultWithoutArgs: true, Subcommands: []cli.Subcommand{
		{Name: "serve", Summary: "serve the opt-out page (the default when the first argument is a flag or absent)",
			Usage: "optout [serve] [flags]", Notes: notes, Examples: serveExamples, Flags: serveFlags(io)},
		{Name: "list", Summary: "list opt-out requests (--status pending: those waiting for review)",
			Usage: "optout list [--status STATUS] [--json] [--audit]", Notes: notes,
			Examples: []string{
				"optout list --status pending          # what waits for review",
				"optout list --json                    # every request, one JSON object a line",
				"optout list --audit                   # every submission and decision, oldest first"},
			Flags: listFlags(io)},
		decision("accept", optout.ActionAccept, "accept request ID: it is honoured from the next scan and measurement on",
			"optout accept ID [--reason TEXT] [flags]"),
		decision("reject", optout.ActionReject, "reject pending request ID, with --reason",
			"optout reject ID --reason TEXT [flags]"),
		decision("withdraw", optout.ActionWithdraw, "withdraw accepted (or pending) request ID: the range is scanned again",
			"optout withdraw ID [--reason TEXT] [flags]"),
	}}
}

// Cmd is optout's help.
var Cmd = cli.Command{
	Name:     "optout",
	Summary:  "the opt-out page and the review of its requests (optout_requests, blocklist/optout.conf)",
	Usage:    "optout [serve] [flags] | optout list|accept|reject|withdraw [flags] [ID]",
	Examples: serveExamples,
	Notes:    notes,
}

var serveExamples = []string{
	"optout --listen :80 --contact noc@example.org                       # plain HTTP on the scanner's address",
	"optout --listen :80 --tls-listen :443 --tls-cert c.pem --tls-key k.pem   # and HTTPS",
	"optout --listen 127.0.0.1:8080 --max-v4-prefix 24                    # local test, at most a /24 per request",
	"optout serve --policy review-all                                     # every request waits for optout accept",
	"optout --rewrite-only                                                # regenerate blocklist/optout.conf and exit",
}

const notes = `Policy (--policy): own-range (default) honours at once a request for a range that contains
the requester's own address (the TCP peer; no proxy header is read), up to
--own-range-max-v4-prefix / --own-range-max-v6-prefix; any other request is stored as
pending until "optout accept ID". all honours every request at once; review-all none.
accept, reject and withdraw each write one optout_audit row (--actor, default the user
and host) and regenerate optout.conf in --blocklist-dir. Only accepted requests are
excluded from scans and measurements.`

func blocklistDirFlag(fs *flag.FlagSet) *string {
	return fs.String("blocklist-dir", blocklist.HomeDir(),
		"directory of the blocklist files; accepted opt-outs go to optout.conf there")
}

// serveFlags binds serve's flags; serve writes nothing on io.Out (it logs).
func serveFlags(io IO) func(fs *flag.FlagSet) cli.RunFunc {
	return func(fs *flag.FlagSet) cli.RunFunc {
		listen := fs.String("listen", ":80", "HTTP listen address (the scanner's own address, port 80)")
		tlsListen := fs.String("tls-listen", "", "HTTPS listen address (e.g. :443); needs --tls-cert and --tls-key")
		tlsCert := fs.String("tls-cert", "", "certificate chain (PEM) for HTTPS")
		tlsKey := fs.String("tls-key", "", "private key (PEM) for HTTPS")
		dir := blocklistDirFlag(fs)
		contact := fs.String("contact", optout.DefaultInfo.Contact, "contact email shown on the page")
		operator := fs.String("operator", optout.DefaultInfo.Operator, "who runs the scans")
		project := fs.String("project-url", "", "link to the project page (optional)")
		releaseDir := fs.String("release-dir", manifest.DefaultDir(home.Dir()), "the data release the page describes under \"What we publish\" (dataset export's directory)")
		releaseURL := fs.String("release-url", "", "where the release is published (empty: on request from --contact)")
		var maxV4, maxV6, ownV4, ownV6 int
		var perMin float64
		cli.IntVar(fs, &maxV4, "max-v4-prefix", optout.DefaultLimits.MinBitsV4, 0, 32, "shortest IPv4 prefix one request may exclude")
		cli.IntVar(fs, &maxV6, "max-v6-prefix", optout.DefaultLimits.MinBitsV6, 0, 128, "shortest IPv6 prefix one request may exclude")
		policy := fs.String("policy", string(optout.PolicyOwnRange), "which requests are honoured at once: own-range, all or review-all")
		cli.IntVar(fs, &ownV4, "own-range-max-v4-prefix", optout.DefaultOwnRange.MinBitsV4, 0, 32, "own-range: shortest IPv4 prefix honoured at once (larger ones wait for review)")
		cli.IntVar(fs, &ownV6, "own-range-max-v6-prefix", optout.DefaultOwnRange.MinBitsV6, 0, 128, "own-range: shortest IPv6 prefix honoured at once")
		cli.FloatVar(fs, &perMin, "posts-per-minute", 6, 0.001, 10000, "form submissions accepted per source and minute (a source is an IPv4 address or an IPv6 /56)")
		rewrite := fs.Bool("rewrite-only", false, "regenerate optout.conf from the database and exit")
		return func(ctx context.Context, log *slog.Logger, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unexpected arguments: %s", strings.Join(args, " "))
			}
			pol, err := optout.ParsePolicy(*policy)
			if err != nil {
				return cli.Usagef("--policy: %v", err)
			}
			if *tlsListen != "" && (*tlsCert == "" || *tlsKey == "") {
				return cli.Usagef("--tls-listen needs --tls-cert and --tls-key")
			}
			// Before the database: an address no listener can take is a usage error (it was
			// exit 1 when the listener failed), a missing blocklist directory a missing
			// prerequisite (it was created, and the page served).
			for _, l := range []struct{ flag, addr string }{{"listen", *listen}, {"tls-listen", *tlsListen}} {
				if l.addr != "" && !*rewrite {
					if err := cli.CheckListenAddr(l.flag, l.addr); err != nil {
						return err
					}
				}
			}
			if err := cli.CheckBlocklistDir("blocklist-dir", *dir); err != nil {
				return err
			}
			st, err := cli.OpenStore(ctx, log)
			if err != nil {
				return err
			}
			defer st.Close()
			info := optout.DefaultInfo
			info.Contact, info.Operator, info.ProjectURL = *contact, *operator, *project
			srv := &optout.Server{Store: st, BlocklistDir: *dir, Info: info, Log: log, PostsPerMinute: perMin,
				Limits: optout.Limits{MinBitsV4: maxV4, MinBitsV6: maxV6}, SecureCookies: *tlsListen != "" && *listen == "",
				Policy: pol, OwnRange: optout.Limits{MinBitsV4: ownV4, MinBitsV6: ownV6},
				ReleaseDir: *releaseDir, ReleaseURL: *releaseURL}
			path, err := srv.Rewrite(ctx)
			if err != nil {
				return err
			}
			log.Info("blocklist file written", "path", path)
			if *rewrite {
				return nil
			}
			g, ctx := errgroup.WithContext(ctx)
			if *listen != "" {
				log.Info("serving the opt-out page", "addr", *listen, "policy", pol)
				g.Go(func() error { return srv.ListenAndServe(ctx, *listen, "", "") })
			}
			if *tlsListen != "" {
				log.Info("serving the opt-out page over TLS", "addr", *tlsListen, "policy", pol)
				g.Go(func() error { return srv.ListenAndServe(ctx, *tlsListen, *tlsCert, *tlsKey) })
			}
			return g.Wait()
		}
	}
}

// listFlags binds list's flags; the rows go to io.Out.
func listFlags(io IO) func(fs *flag.FlagSet) cli.RunFunc {
	return func(fs *flag.FlagSet) cli.RunFunc {
		status := fs.String("status", "", "only requests with this status: pending, accepted, rejected or withdrawn")
		asJSON := fs.Bool("json", false, "one JSON object a line")
		audit := fs.Bool("audit", false, "list the audit rows (optout_audit) instead of the requests")
		return func(ctx context.Context, log *slog.Logger, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unexpected arguments: %s", strings.Join(args, " "))
			}
			switch *status {
			case "", optout.StatusPending, optout.StatusAccepted, optout.StatusRejected, optout.StatusWithdrawn:
			default:
				return cli.Usagef("--status %q: want pending, accepted, rejected or withdrawn", *status)
			}
			st, err := cli.OpenStore(ctx, log)
			if err != nil {
				return err
			}
			defer st.Close()
			if *audit {
				rows, err := optout.Audit(ctx, st, 0)
				if err != nil {
					return err
				}
				return printRows(io.Out, *asJSON, rows, "AUDIT\tREQUEST\tACTION\tFROM\tTO\tACTOR\tAT\tREASON", func(r optout.AuditRow) string {
					from := "-"
					if r.FromStatus != nil {
						from = *r.FromStatus
					}
					return fmt.Sprintf("%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s", r.ID, r.RequestID, r.Action, from, r.ToStatus, r.Actor,
						r.At.UTC().Format(time.RFC3339), optout.OneLine(r.Reason))
				})
			}
			rows, err := optout.List(ctx, st, *status)
			if err != nil {
				return err
			}
			return printRows(io.Out, *asJSON, rows, "ID\tSTATUS\tPREFIX\tEMAIL\tSOURCE\tCREATED\tUPDATED\tREASON", func(r optout.Entry) string {
				src := "-"
				if r.SourceAddr != nil {
					src = r.SourceAddr.String()
				}
				return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s", r.ID, r.Status, r.Prefix, optout.OneLine(r.Email), src,
					r.CreatedAt.UTC().Format(time.RFC3339), r.UpdatedAt.UTC().Format(time.RFC3339), optout.OneLine(r.Reason))
			})
		}
	}
}

// printRows writes rows as JSON, one object a line, or as a table: header, then row(r)
// for each row, in tab-separated columns.
func printRows[T any](w io.Writer, asJSON bool, rows []T, header string, row func(T) string) error {
	if asJSON {
		return writeJSON(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, row(r))
	}
	return tw.Flush()
}

func writeJSON[T any](w io.Writer, rows []T) error {
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// decider binds the flags of an operator action on one request (accept, reject,
// withdraw); the request's new status goes to io.Out.
func decider(io IO, action string) func(fs *flag.FlagSet) cli.RunFunc {
	return func(fs *flag.FlagSet) cli.RunFunc {
		reason := fs.String("reason", "", "why, for the audit row (required for reject)")
		actor := fs.String("actor", defaultActor(), "who decides, for the audit row")
		dir := blocklistDirFlag(fs)
		return func(ctx context.Context, log *slog.Logger, args []string) error {
			if len(args) != 1 {
				return cli.Usagef("want exactly one request ID (see optout list)")
			}
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return cli.Usagef("request ID %q: want a positive number (see optout list)", args[0])
			}
			*reason = strings.TrimSpace(*reason)
			if action == optout.ActionReject && *reason == "" {
				return cli.Usagef("reject needs --reason")
			}
			if *actor == "" {
				return cli.Usagef("--actor must not be empty")
			}
			for _, f := range []struct{ name, v string }{{"reason", *reason}, {"actor", *actor}} {
				if err := optout.CheckText("--"+f.name, f.v, false); err != nil {
					return cli.Usagef("%v", err)
				}
			}
			if err := cli.CheckBlocklistDir("blocklist-dir", *dir); err != nil {
				return err
			}
			st, err := cli.OpenStore(ctx, log)
			if err != nil {
				return err
			}
			defer st.Close()
			e, err := Decide(ctx, st, *dir, id, action, "cli "+*actor, *reason, log)
			if err != nil {
				return err
			}
			fmt.Fprintf(io.Out, "%d\t%s\t%s\n", e.ID, e.Status, e.Prefix)
			return nil
		}
	}
}

// Decide applies an operator's action to request id, with its audit row, then regenerates
// optout.conf in dir. An unknown id or a status that does not allow the action is a usage
// error (exit code 2) and changes nothing.
func Decide(ctx context.Context, st *store.Store, dir string, id int64, action, actor, reason string, log *slog.Logger) (optout.Entry, error) {
	e, err := optout.Decide(ctx, st, id, action, actor, reason, time.Now().UTC())
	var te *optout.TransitionError
	switch {
	case errors.Is(err, optout.ErrNoSuchRequest), errors.As(err, &te):
		return e, &cli.ExitError{Code: cli.ExitUsage, Err: err}
	case err != nil:
		return e, err
	}
	log.Info("opt-out "+action, "id", e.ID, "prefix", e.Prefix, "status", e.Status, "actor", actor, "reason", reason)
	srv := &optout.Server{Store: st, BlocklistDir: dir, Log: log}
	path, err := srv.Rewrite(ctx)
	if err != nil {
		return e, fmt.Errorf("request %d is %s, but %s could not be regenerated (run optout --rewrite-only): %w",
			e.ID, e.Status, filepath.Join(dir, optout.OptOutFile), err)
	}
	log.Info("blocklist file written", "path", path)
	return e, nil
}

func defaultActor() string {
	name := os.Getenv("SUDO_USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, _ := os.Hostname()
	if host != "" {
		return name + "@" + host
	}
	return name
}
