package command

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/cli"
)

func blocklistFlags(fs *flag.FlagSet) runFunc {
	var tf targetFlags
	tf.register(fs)
	var why string
	var noDB bool
	fs.StringVar(&why, "why", "", "say whether ADDR is excluded and by which entries")
	fs.BoolVar(&noDB, "no-db", false, "leave out the database's opt-outs")
	return func(ctx context.Context, log *slog.Logger, args []string) error {
		_, tb, err := tf.prefixes(nil)
		if err != nil {
			return err
		}
		var opt []blocklist.Entry
		if !noDB {
			s, err := cli.OpenStore(ctx, log)
			if err != nil {
				return err
			}
			defer s.Close()
			if opt, err = blocklist.OptOuts(ctx, s); err != nil {
				return err
			}
		}
		files, err := blocklist.Dir(tf.blocklistDir)
		if err != nil {
			return cli.Environmentf("%v", err)
		}
		var carve []netip.Prefix
		if tb != nil {
			carve = append(carve, tb.Masked())
		}
		l, err := blocklist.Build(append(append(blocklist.Reserved(), files...), opt...), carve)
		if err != nil {
			return cli.Usagef("%v", err)
		}
		if why != "" {
			a, err := netip.ParseAddr(why)
			if err != nil {
				return cli.Usagef("--why: %v", err)
			}
			w := l.Why(a)
			if len(w) == 0 {
				fmt.Printf("%s is not excluded\n", a)
				return nil
			}
			for _, e := range w {
				fmt.Printf("%s is excluded by %s (%s %s) %s\n", a, e.Prefix, e.Source, e.Origin, e.Note)
			}
			return nil
		}
		_, err = l.WriteZmap(os.Stdout)
		return err
	}
}
