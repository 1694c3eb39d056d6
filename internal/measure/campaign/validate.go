package campaign

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/rtt"
)

// Ranges of a round's settings (the flags of cmd/measure), checked by Validate.
const (
	MaxConcurrency = 1024             // --concurrency: resolvers measured at once
	MinTimeout     = time.Millisecond // --timeout: per exchange
	MaxTimeout     = time.Minute
	MaxRTTSamples  = rtt.MaxSamples // --rtt-samples: per (transport, port)
	MinPersistent  = 2              // --persistent: queries per session in persistent mode
	MaxPersistent  = 100
	MaxEvery       = 7 * 24 * time.Hour // --every: the longest interval between rounds
	MaxSpread      = time.Hour          // --spread: one round's starts, within its hour
	MinDBDeadline  = time.Second        // --db-deadline: how long a round waits for the database
	MaxDBDeadline  = 24 * time.Hour
)

// Validate checks every setting against its range: --concurrency 1..MaxConcurrency,
// --timeout MinTimeout..MaxTimeout, --rtt-samples 1..MaxRTTSamples, --persistent
// MinPersistent..MaxPersistent, --db-deadline
// MinDBDeadline..MaxDBDeadline, --query-name a domain name, --vantage not empty; the spread
// and the internal settings must not be negative. Zero values are not accepted: Run
// fills them with the defaults first, the command checks the flags as given. Errors are
// usage errors naming the flag (exit code 2).
func (c *Config) Validate() error {
	if err := cli.FirstError(
		cli.InRange("concurrency", c.Concurrency, 1, MaxConcurrency),
		cli.InRange("timeout", c.Timeout, MinTimeout, MaxTimeout),
		cli.InRange("rtt-samples", c.RTTSamples, 1, MaxRTTSamples),
		cli.InRange("persistent", c.Persistent, MinPersistent, MaxPersistent),
		cli.InRange("spread", c.Spread, 0, MaxEvery),
		cli.InRange("db-deadline", c.DBDeadline, MinDBDeadline, MaxDBDeadline),
	); err != nil {
		return err
	}
	if _, ok := dns.IsDomainName(c.Name); !ok || c.Name == "" {
		return cli.Usagef("--query-name %q is not a domain name", c.Name)
	}
	if c.VantageID == "" {
		return cli.Usagef("--vantage must not be empty")
	}
	if c.RTTTimeout < 0 || c.BatchSize < 0 || c.Progress < 0 {
		return fmt.Errorf("campaign config: negative RTTTimeout %v, BatchSize %d or Progress %v", c.RTTTimeout, c.BatchSize, c.Progress)
	}
	return nil
}

// recoverResolver, deferred by resolver, turns a panic while measuring t into rows: the
// rows made before it are kept, every unit without a measured row gets one with status
// error and the panic as its error, and the stack goes to the log. The worker, and the
// round, go on with the next resolver.
func (r *runner) recoverResolver(t Target, out *resolverResult) {
	p := recover()
	if p == nil {
		return
	}
	r.log.Error("measuring a resolver panicked: its unmeasured exchanges are stored with status error",
		"addr", t.Addr, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	type unitKey struct {
		p       string
		port    int32
		variant string
		mode    string
		ks      string
	}
	measured := map[unitKey]bool{}
	for _, m := range out.batch.meas {
		if m.Phase == PhaseMeasured {
			measured[unitKey{m.Protocol, m.Port, m.Variant, m.Mode, m.KeyShare}] = true
		}
	}
	res := &measure.Result{Status: measure.StatusError, Err: fmt.Errorf("panic: %v", p), StartedAt: time.Now()}
	for _, u := range r.units(t) {
		if measured[unitKey{string(u.ep.Protocol), int32(u.ep.Port), u.variant, string(u.mode), string(u.ks)}] {
			continue
		}
		rows, _ := r.rows(t, u, PhaseMeasured, res)
		out.batch.meas = append(out.batch.meas, rows...)
	}
	out.batch.targets = 1
}
