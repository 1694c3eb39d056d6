package command

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

func populationFlags(fs *flag.FlagSet) cli.RunFunc {
	var seed uint64
	cli.Uint64Var(fs, &seed, "seed", population.DefaultSeed, 0, math.MaxUint64, "generator seed")
	out := fs.String("out", "", "write to FILE instead of stdout")
	return func(ctx context.Context, log *slog.Logger, _ []string) error {
		data := population.Generate(seed)
		if _, err := population.Parse(bytesReader(data)); err != nil {
			return fmt.Errorf("generated population does not parse: %w", err)
		}
		if *out == "" {
			_, err := os.Stdout.Write(data)
			return err
		}
		if err := os.WriteFile(*out, data, 0o644); err != nil {
			return err
		}
		log.Info("population written", "file", *out, "seed", seed, "bytes", len(data))
		return nil
	}
}

func checkFlags(fs *flag.FlagSet) cli.RunFunc {
	file := fs.String("population", population.DefaultPath(), "population file")
	asJSON := fs.Bool("json", false, "print the parsed population as one JSON document (the Go structures' json names; durations in ns)")
	return func(ctx context.Context, log *slog.Logger, _ []string) error {
		p, err := population.Load(*file)
		if err != nil {
			return cli.Environmentf("%v", err)
		}
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(p)
		}
		total := 0
		for _, c := range p.Classes() {
			n := 0
			for _, r := range p.ByClass(c) {
				n += r.Size()
			}
			total += n
			fmt.Printf("%-24s %6d\n", c, n)
		}
		fmt.Printf("%-24s %6d\n%-24s %6d\n", "listed", total, "quic endpoints", len(p.QUICEndpoints()))
		return nil
	}
}

// bytesReader reads b.
func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
