package command

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/doqscan/doqscan/internal/probe"
)

func probesFlags(fs *flag.FlagSet) runFunc {
	var dir string
	fs.StringVar(&dir, "write", "", "write the standard probe files into DIR (the repository's probes/)")
	return func(ctx context.Context, log *slog.Logger, args []string) error {
		if dir != "" {
			names, err := probe.WriteProbes(dir)
			if err != nil {
				return err
			}
			for _, n := range names {
				fmt.Println(n)
			}
			return nil
		}
		files, err := probe.StandardProbes()
		if err != nil {
			return err
		}
		os.Stdout.Write(probe.ProbesReadme(files))
		return nil
	}
}
