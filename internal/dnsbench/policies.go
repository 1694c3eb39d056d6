package dnsbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/measure"
)

// ComparePolicies runs the benchmark c once per connection policy (same targets, same
// load), in the order given: the connection-reuse comparison.
func ComparePolicies(ctx context.Context, c Config, policies []measure.Mode, guard *labnet.Guard, log *slog.Logger) ([]*Report, error) {
	if len(policies) == 0 {
		return nil, configErr("the comparison needs at least one policy")
	}
	var out []*Report
	for _, p := range policies {
		c.Policy = p
		if err := c.Validate(); err != nil {
			return nil, err
		}
		rs, err := Run(ctx, c, guard, log)
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// WritePolicyTable writes one Markdown table of the cold query latency per target and
// policy: the mean and p50 of the total latency (issue to answer, including any session
// set-up), and the success rate.
func WritePolicyTable(w io.Writer, rs []*Report) error {
	var targets, policies []string
	cell := map[[2]string]*Report{}
	for _, r := range rs {
		if !slices.Contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
		if !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
		cell[[2]string{r.Target, r.Policy}] = r
	}
	var sb strings.Builder
	sb.WriteString("Query latency by connection policy (total ms, issue to answer incl. session set-up: mean / p50; success)\n\n| target |")
	for _, p := range policies {
		fmt.Fprintf(&sb, " %s |", p)
	}
	sb.WriteString("\n|---|" + strings.Repeat("---|", len(policies)) + "\n")
	for _, t := range targets {
		fmt.Fprintf(&sb, "| %s |", t)
		for _, p := range policies {
			r := cell[[2]string{t, p}]
			switch {
			case r == nil:
				sb.WriteString(" - |")
			case r.Answered == 0:
				fmt.Fprintf(&sb, " no answer (%s) |", strconv.FormatFloat(100*r.SuccessRate, 'f', 1, 64)+"%")
			default:
				fmt.Fprintf(&sb, " %.2f / %.2f; %.1f%% |", r.Total.Mean, r.Total.P50, 100*r.SuccessRate)
			}
		}
		sb.WriteString("\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}
