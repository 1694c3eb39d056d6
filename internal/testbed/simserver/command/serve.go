package command

import (
	"context"
	"flag"
	"log/slog"
	"net/netip"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/proc"
	"github.com/doqscan/doqscan/internal/testbed/simserver"
)

func serveFlags(fs *flag.FlagSet) cli.RunFunc {
	file := fs.String("population", population.DefaultPath(), "population file")
	listen := fs.String("listen", "0.0.0.0", "address to bind (0.0.0.0: every address of the namespace)")
	listen6 := fs.String("listen6", "::", "IPv6 address to bind when the population has an IPv6 half (:: every IPv6 address of the namespace; none: IPv4 only)")
	ready := fs.String("ready-file", "", "create this file once every listener is bound")
	noQUIC := fs.Bool("no-quic", false, "do not start the QUIC/DoQ side")
	noDNS := fs.Bool("no-dns", false, "do not start the DNS/DoT/DoH side")
	return func(ctx context.Context, log *slog.Logger, _ []string) error {
		p, err := population.Load(*file)
		if err != nil {
			return cli.Environmentf("%v", err)
		}
		addr, err := netip.ParseAddr(*listen)
		if err != nil {
			return cli.Usagef("--listen: %v", err)
		}
		cfg := simserver.Config{Population: p, Listen: addr, NoQUIC: *noQUIC, NoDNS: *noDNS, Logger: log}
		if *listen6 == "none" {
			cfg.NoIPv6 = true
		} else if cfg.Listen6, err = netip.ParseAddr(*listen6); err != nil || !cfg.Listen6.Is6() {
			return cli.Usagef("--listen6: want an IPv6 address or none, got %q", *listen6)
		}
		s, err := simserver.Start(ctx, cfg)
		if err != nil {
			return err
		}
		if err := proc.SignalReady(); err != nil {
			return err
		}
		if *ready != "" {
			if err := os.WriteFile(*ready, []byte("ready\n"), 0o644); err != nil {
				return err
			}
		}
		transports := 0
		if s.QUIC != nil {
			transports = s.QUIC.Transports()
		}
		log.Info("simserver ready", "population", *file, "records", len(p.Records), "records6", len(p.Records6), "listen", addr, "listen6", cfg.Listen6, "quic_transports", transports)
		return s.Wait()
	}
}
