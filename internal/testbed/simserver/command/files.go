package command

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/testbed/geodb"
	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

func pkiFlags(fs *flag.FlagSet) cli.RunFunc {
	file := fs.String("population", population.DefaultPath(), "population file")
	out := fs.String("out", home.Path("var", "pki"), "output directory")
	return func(ctx context.Context, log *slog.Logger, _ []string) error {
		p, err := population.Load(*file)
		if err != nil {
			return cli.Environmentf("%v", err)
		}
		k, err := pki.New(p)
		if err != nil {
			return err
		}
		if err := k.WriteDir(*out); err != nil {
			return err
		}
		for _, n := range k.Names() {
			log.Info("certificate", "name", n, "chain_bytes", k.ChainBytes(n), "file", *out+"/"+n+".crt")
		}
		return nil
	}
}

func geodbFlags(fs *flag.FlagSet) cli.RunFunc {
	file := fs.String("population", population.DefaultPath(), "population file")
	out := fs.String("out", home.Path("var", "geoip"), "output directory")
	bt := fs.String("build-time", "", "database build time, RFC 3339 (default: the population file's mtime)")
	return func(ctx context.Context, log *slog.Logger, _ []string) error {
		p, err := population.Load(*file)
		if err != nil {
			return cli.Environmentf("%v", err)
		}
		var when time.Time
		if *bt != "" {
			if when, err = time.Parse(time.RFC3339, *bt); err != nil {
				return cli.Usagef("--build-time: %v", err)
			}
		} else {
			st, err := os.Stat(*file)
			if err != nil {
				return cli.Environmentf("%v", err)
			}
			when = st.ModTime().UTC().Truncate(time.Second)
		}
		f, err := geodb.Write(p, *out, when)
		if err != nil {
			return err
		}
		log.Info("geoip databases written", "city", f.City, "asn", f.ASN, "build_time", when.Format(time.RFC3339))
		return nil
	}
}
