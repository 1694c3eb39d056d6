package dnsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/doqscan/doqscan/internal/labnet"
)

// SweepLevels are the loss levels of the UDP/DoT/DoQ field report (per direction).
var SweepLevels = []float64{0, 0.01, 0.05, 0.10, 0.15, 0.20}

// LossSetter sets the emulated per-direction loss of the path to addr (on the testbed:
// the delay line's control socket, testbed.SetPath).
type LossSetter func(ctx context.Context, addr netip.Addr, loss float64) error

// Sweep runs the benchmark c once per loss level: before each level it sets the loss
// of every target's path with set, then runs every target (Run) with the level in the
// reports' PathLoss and Label. The reports are in level order, targets in c's order.
// On return (also on error) reset, if set, restores the paths.
func Sweep(ctx context.Context, c Config, levels []float64, set LossSetter, reset func(context.Context) error,
	guard *labnet.Guard, log *slog.Logger) (out []*Report, err error) {
	if len(levels) == 0 {
		return nil, configErr("the sweep needs at least one loss level")
	}
	for _, l := range levels {
		if !(l >= 0 && l <= 1) {
			return nil, configErr("bad loss level %v (a probability from 0 to 1)", l)
		}
	}
	if set == nil {
		return nil, configErr("the sweep needs a way to set the path loss")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reset != nil {
		defer func() { err = errors.Join(err, reset(context.WithoutCancel(ctx))) }()
	}
	var addrs []netip.Addr
	for _, t := range c.Targets {
		if !slices.Contains(addrs, t.Addr.Addr()) {
			addrs = append(addrs, t.Addr.Addr())
		}
	}
	label := c.Label
	for _, l := range levels {
		for _, a := range addrs {
			if err := set(ctx, a, l); err != nil {
				return out, fmt.Errorf("setting the loss of %v to %v: %w", a, l, err)
			}
		}
		c.Label = strings.TrimSpace(label + " loss=" + FormatLoss(l))
		log.Info("sweep level", "loss", FormatLoss(l), "targets", len(c.Targets))
		rs, err := Run(ctx, c, guard, log)
		for _, r := range rs {
			loss := l
			r.PathLoss = &loss
		}
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// FormatLoss writes a loss probability as a percentage ("5%").
func FormatLoss(l float64) string { return strconv.FormatFloat(100*l, 'g', 4, 64) + "%" }

// WriteSweepTables writes the field report's three tables from sweep reports (those
// with PathLoss): QPS, mean resolve time of the answered queries (ms) and success rate,
// one row per target and policy, one column per loss level, as Markdown.
func WriteSweepTables(w io.Writer, rs []*Report) error {
	var levels []float64
	var rows []string
	cell := map[string]map[float64]*Report{}
	for _, r := range rs {
		if r.PathLoss == nil {
			continue
		}
		row := r.Target + " " + r.Policy
		if cell[row] == nil {
			cell[row] = map[float64]*Report{}
			rows = append(rows, row)
		}
		cell[row][*r.PathLoss] = r
		if !slices.Contains(levels, *r.PathLoss) {
			levels = append(levels, *r.PathLoss)
		}
	}
	slices.Sort(levels)
	var sb strings.Builder
	table := func(title string, f func(*Report) string) {
		fmt.Fprintf(&sb, "%s\n\n| target |", title)
		for _, l := range levels {
			fmt.Fprintf(&sb, " %s |", FormatLoss(l))
		}
		sb.WriteString("\n|---|" + strings.Repeat("---|", len(levels)) + "\n")
		for _, row := range rows {
			fmt.Fprintf(&sb, "| %s |", row)
			for _, l := range levels {
				if r := cell[row][l]; r != nil {
					fmt.Fprintf(&sb, " %s |", f(r))
				} else {
					sb.WriteString(" - |")
				}
			}
			sb.WriteString("\n")
		}
		sb.WriteString("\n")
	}
	table("Queries per second (answered)", func(r *Report) string { return strconv.FormatFloat(r.QPS, 'f', 1, 64) })
	table("Mean resolve time of answered queries (ms)", func(r *Report) string {
		if r.Answered == 0 {
			return "-"
		}
		return strconv.FormatFloat(r.Latency.Mean, 'f', 2, 64)
	})
	table("Success rate (answered / sent)", func(r *Report) string { return strconv.FormatFloat(100*r.SuccessRate, 'f', 2, 64) + "%" })
	_, err := io.WriteString(w, sb.String())
	return err
}
