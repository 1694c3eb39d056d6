// Package dnsbench is a load generator for DNS resolvers over DoUDP, DoTCP, DoT, DoH
// (GET/POST), DoH3 and DoQ. It drives the measure package's clients (kernel-stamped
// resolve times, classified statuses) from workers, each with a connection policy: a new
// session per query, resumed sessions, 0-RTT, or persistent sessions. Load is either as
// fast as the resolver answers (every worker keeps one query outstanding), a target
// rate, or a resperf-style ramp that raises the rate linearly until the loss of a
// second exceeds a threshold and reports the highest rate sustained under it.
package dnsbench

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/measure"
)

// Target is one resolver endpoint over one protocol.
type Target struct {
	Protocol   measure.Protocol
	Variant    string // DoH/DoH3: GET or POST
	Addr       netip.AddrPort
	ServerName string // SNI; empty: none
}

// String is the target in the form ParseTarget reads.
func (t Target) String() string {
	p := string(t.Protocol)
	if t.Variant != "" {
		p += "-" + strings.ToLower(t.Variant)
	}
	return p + "://" + t.Addr.String()
}

// ParseTarget reads "PROTOCOL://ADDRESS[:PORT]" where PROTOCOL is a protocol of
// internal/protocol's table, one with request variants also NAME-get or NAME-post (doh,
// doh-get, doh-post; without a method: POST).
func ParseTarget(s string) (Target, error) {
	proto, hostport, ok := strings.Cut(s, "://")
	if !ok {
		return Target{}, fmt.Errorf("target %q: want PROTOCOL://ADDRESS[:PORT]", s)
	}
	var t Target
	base, variant, _ := strings.Cut(strings.ToLower(proto), "-")
	t.Protocol = measure.Protocol(base)
	if _, err := measure.For(t.Protocol); err != nil {
		return Target{}, fmt.Errorf("target %q: %v", s, err)
	}
	switch {
	case len(t.Protocol.Spec().Variants) > 0:
		switch variant {
		case "", "post":
			t.Variant = measure.VariantPOST
		case "get":
			t.Variant = measure.VariantGET
		default:
			return Target{}, fmt.Errorf("target %q: DoH method %q: want get or post", s, variant)
		}
	case variant != "":
		return Target{}, fmt.Errorf("target %q: only DoH has a method", s)
	}
	if ap, err := netip.ParseAddrPort(hostport); err == nil {
		t.Addr = ap
	} else if a, err := netip.ParseAddr(strings.Trim(hostport, "[]")); err == nil {
		t.Addr = netip.AddrPortFrom(a, t.Protocol.DefaultPort())
	} else {
		return Target{}, fmt.Errorf("target %q: address %q: want an IP address with an optional port", s, hostport)
	}
	if t.Addr.Port() == 0 {
		return Target{}, fmt.Errorf("target %q: port 0", s)
	}
	return t, nil
}

// Load modes.
const (
	LoadMax  = "max"  // as fast as the resolver answers
	LoadRate = "rate" // a target rate
	LoadRamp = "ramp" // a rate rising linearly to RampMax
)

// Policies are the connection policies, named as measure's modes.
var Policies = []measure.Mode{measure.ModeFresh, measure.ModePersistent, measure.ModeResumed, measure.Mode0RTT}

// Config is one benchmark: every target in turn under the same load.
type Config struct {
	Targets []Target
	Queries []Question // cycled through in order
	Policy  measure.Mode
	Workers int // concurrent workers, Streams queries outstanding each (persistent; else one)
	// Duration and Count bound the load (either or both; at least one): queries are
	// issued for Duration, or until Count were issued.
	Duration time.Duration
	Count    int64
	Rate     float64 // LoadRate: queries per second over all workers
	// LoadRamp: the rate rises linearly from 0 to RampMax over Duration; the run stops
	// at the first second whose loss (1 - answered/sent) exceeds RampLoss once at
	// least rampMinSent queries were sent in it.
	RampMax  float64
	RampLoss float64
	Load     string
	Timeout  time.Duration // per query (fresh policies: per session)
	// SessionQueries: persistent policy, queries per session before a new one (>= 1).
	SessionQueries int
	// Streams: persistent policy, queries each worker keeps outstanding on its session
	// (default 1): DoQ streams, DoH/DoH3 concurrent requests, DoTCP/DoT pipelined
	// queries and DoUDP queries on one socket, answers matched by ID. Every query keeps
	// its own Timeout; a session then has Timeout for its set-up, apart.
	Streams  int
	KeyShare measure.KeyShare
	Label    string // free text stored with the run (e.g. "loss=5%")
	// Progress, when > 0, is how often Run logs the queries so far.
	Progress time.Duration
}

// Bounds of a Config (and of dnsbench's flags).
const (
	// MaxStreams bounds Config.Streams: quic-go's default limit of a peer's concurrent
	// bidirectional streams (quic.Config.MaxIncomingStreams) and HTTP/2's usual
	// SETTINGS_MAX_CONCURRENT_STREAMS are 100.
	MaxStreams = 100
	// MaxWorkers bounds Config.Workers.
	MaxWorkers = 10000
	// MaxRate bounds Config.Rate and Config.RampMax (queries/s).
	MaxRate = 1e7
	// MaxRampLoss bounds Config.RampLoss (a loss fraction below 1).
	MaxRampLoss = 0.99
	// MaxDuration bounds Config.Duration.
	MaxDuration = 30 * 24 * time.Hour
	// MaxSessionQueries bounds Config.SessionQueries.
	MaxSessionQueries = 1_000_000_000
	// MinTimeout and MaxTimeout bound Config.Timeout.
	MinTimeout = time.Millisecond
	MaxTimeout = time.Minute
)

// Validation errors (cmd/dnsbench maps them to exit code 2).
var ErrConfig = errors.New("bad configuration")

func configErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
}

// Validate checks c and fills defaults; errors wrap ErrConfig.
func (c *Config) Validate() error {
	if len(c.Targets) == 0 {
		return configErr("no targets")
	}
	if len(c.Queries) == 0 {
		c.Queries = []Question{{Name: dnsmsg.DefaultQueryName, QType: 1}}
	}
	if c.Policy == "" {
		c.Policy = measure.ModePersistent
	}
	okPolicy := false
	for _, p := range Policies {
		okPolicy = okPolicy || p == c.Policy
	}
	if !okPolicy {
		return configErr("policy %q: want fresh, persistent, resumed or 0rtt", c.Policy)
	}
	if c.Workers == 0 {
		c.Workers = 1
	}
	if c.Workers < 1 || c.Workers > MaxWorkers {
		return configErr("workers %d: want 1..%d", c.Workers, MaxWorkers)
	}
	if c.Duration < 0 || c.Duration > MaxDuration || c.Count < 0 {
		return configErr("duration %v, count %d: want 0..%v and 0 or more", c.Duration, c.Count, MaxDuration)
	}
	// 0 is "no target rate" (and no ramp); negative, NaN and beyond MaxRate are no rate.
	if !(c.Rate >= 0 && c.Rate <= MaxRate) || !(c.RampMax >= 0 && c.RampMax <= MaxRate) {
		return configErr("rate %v, ramp maximum %v: want 0..%g queries/s", c.Rate, c.RampMax, float64(MaxRate))
	}
	if c.Load == "" {
		c.Load = LoadMax
		if c.Rate > 0 {
			c.Load = LoadRate
		}
	}
	switch c.Load {
	case LoadMax:
	case LoadRate:
		if !(c.Rate > 0 && c.Rate <= MaxRate) {
			return configErr("rate %v: want 0 < rate <= %g queries/s", c.Rate, float64(MaxRate))
		}
	case LoadRamp:
		if !(c.RampMax > 0 && c.RampMax <= MaxRate) {
			return configErr("ramp maximum %v: want 0 < max <= %g queries/s", c.RampMax, float64(MaxRate))
		}
		if !(c.RampLoss >= 0 && c.RampLoss <= MaxRampLoss) {
			return configErr("ramp loss threshold %v: want 0..%v", c.RampLoss, MaxRampLoss)
		}
		if c.Duration <= 0 {
			return configErr("a ramp needs a duration (the time to reach the maximum)")
		}
	default:
		return configErr("load %q: want max, rate or ramp", c.Load)
	}
	if c.Duration == 0 && c.Count == 0 {
		return configErr("neither a duration nor a count: the run would not end")
	}
	if c.Timeout == 0 {
		c.Timeout = measure.DefaultTimeout
	}
	if c.Timeout < MinTimeout || c.Timeout > MaxTimeout {
		return configErr("timeout %v: want %v..%v", c.Timeout, MinTimeout, MaxTimeout)
	}
	if c.SessionQueries == 0 {
		c.SessionQueries = 1000
	}
	if c.SessionQueries < 1 || c.SessionQueries > MaxSessionQueries {
		return configErr("session queries %d: want 1..%d", c.SessionQueries, MaxSessionQueries)
	}
	if c.Streams == 0 {
		c.Streams = 1
	}
	if c.Streams < 1 || c.Streams > MaxStreams {
		return configErr("streams %d: want 1..%d", c.Streams, MaxStreams)
	}
	if c.Streams > 1 && c.Policy != measure.ModePersistent {
		return configErr("streams %d with policy %s: several queries outstanding need the persistent policy (the others run one query per session)", c.Streams, c.Policy)
	}
	if c.Streams > c.SessionQueries {
		return configErr("streams %d > session queries %d: a session never has that many queries", c.Streams, c.SessionQueries)
	}
	if c.KeyShare == "" {
		c.KeyShare = measure.KeyShareX25519
	}
	if _, err := c.KeyShare.Curves(); err != nil {
		return configErr("%v", err)
	}
	return nil
}

// formatRate prints a rate for logs.
func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', 1, 64) }
