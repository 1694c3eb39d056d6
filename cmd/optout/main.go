// Command optout serves the opt-out web page on the scanner's own address: who scans,
// why, and a form through which operators exclude their ranges from every later scan.
package main

import (
	"context"
	"log/slog"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/optout"
)

var cmd = cli.Command{
	Name:    "optout",
	Summary: "serve the opt-out web page and keep blocklist/optout.conf in step with the database",
	Usage:   "optout [flags]",
	Examples: []string{
		"optout --listen :80 --contact noc@example.org                       # plain HTTP on the scanner's address",
		"optout --listen :80 --tls-listen :443 --tls-cert c.pem --tls-key k.pem   # and HTTPS",
		"optout --listen 127.0.0.1:8080 --max-v4-prefix 24                    # local test, at most a /24 per request",
		"optout --rewrite-only                                                # regenerate blocklist/optout.conf and exit",
	},
}

func main() {
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	listen := fs.String("listen", ":80", "HTTP listen address (the scanner's own address, port 80)")
	tlsListen := fs.String("tls-listen", "", "HTTPS listen address (e.g. :443); needs --tls-cert and --tls-key")
	tlsCert := fs.String("tls-cert", "", "certificate chain (PEM) for HTTPS")
	tlsKey := fs.String("tls-key", "", "private key (PEM) for HTTPS")
	dir := fs.String("blocklist-dir", blocklist.HomeDir(), "directory of the blocklist files; opt-outs go to optout.conf there")
	contact := fs.String("contact", optout.DefaultInfo.Contact, "contact email shown on the page")
	operator := fs.String("operator", optout.DefaultInfo.Operator, "who runs the scans")
	project := fs.String("project-url", "", "link to the project page (optional)")
	maxV4 := fs.Int("max-v4-prefix", optout.DefaultLimits.MinBitsV4, "shortest IPv4 prefix one request may exclude")
	maxV6 := fs.Int("max-v6-prefix", optout.DefaultLimits.MinBitsV6, "shortest IPv6 prefix one request may exclude")
	perMin := fs.Float64("posts-per-minute", 6, "form submissions accepted per source and minute (a source is an IPv4 address or an IPv6 /56), 0.001..10000")
	rewrite := fs.Bool("rewrite-only", false, "regenerate optout.conf from the database and exit")
	cli.Main(fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		if len(args) > 0 {
			return cli.Usagef("unexpected arguments: %s", strings.Join(args, " "))
		}
		if err := cli.FirstError(
			cli.InRange("max-v4-prefix", *maxV4, 0, 32),
			cli.InRange("max-v6-prefix", *maxV6, 0, 128),
			cli.InRange("posts-per-minute", *perMin, 0.001, 10000),
		); err != nil {
			return err
		}
		if *tlsListen != "" && (*tlsCert == "" || *tlsKey == "") {
			return cli.Usagef("--tls-listen needs --tls-cert and --tls-key")
		}
		st, err := cli.OpenStore(ctx, log)
		if err != nil {
			return err
		}
		defer st.Close()
		info := optout.DefaultInfo
		info.Contact, info.Operator, info.ProjectURL = *contact, *operator, *project
		srv := &optout.Server{Store: st, BlocklistDir: *dir, Info: info, Log: log, PostsPerMinute: *perMin,
			Limits: optout.Limits{MinBitsV4: *maxV4, MinBitsV6: *maxV6}, SecureCookies: *tlsListen != "" && *listen == ""}
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
			log.Info("serving the opt-out page", "addr", *listen)
			g.Go(func() error { return srv.ListenAndServe(ctx, *listen, "", "") })
		}
		if *tlsListen != "" {
			log.Info("serving the opt-out page over TLS", "addr", *tlsListen)
			g.Go(func() error { return srv.ListenAndServe(ctx, *tlsListen, *tlsCert, *tlsKey) })
		}
		return g.Wait()
	})
}
