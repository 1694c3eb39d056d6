package command

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/doqscan/doqscan/internal/probe"
)

func runProbes(log *slog.Logger, args []string) error {
	fs := sub("probes", "zprobe probes [--write DIR]", "zprobe probes --write probes")
	var dir string
	fs.StringVar(&dir, "write", "", "write the standard probe files into DIR (the repository's probes/)")
	if err := parse(log, fs, args); err != nil {
		return ignoreHelp(err)
	}
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
