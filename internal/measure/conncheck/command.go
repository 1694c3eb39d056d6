package conncheck

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/rtt"
)

// Flags binds the conncheck command's flags to a Config.
type Flags struct {
	Config  Config
	Vantage cli.VantageFlags
	JSON    bool

	protocols, idleWaits, tokenAges, sizes, keyShares, only string
	amplification                                           bool
	rttSamples                                              int
}

var weekRE = regexp.MustCompile(`^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$`)

// Register binds f to fs (defaults: the package's).
func (f *Flags) Register(fs *flag.FlagSet) {
	c := &f.Config
	f.Vantage.Register(fs)
	fs.StringVar(&c.Label, "label", "weekly", "run label (run identity: ISO week + vantage + label)")
	fs.StringVar(&c.Week, "week", "", "ISO week naming the run (YYYY-Www; default $DOQSCAN_RUN_KEY under jobrun, else this week)")
	cli.Int64Var(fs, &c.RunID, "run-id", 0, 0, math.MaxInt64, "verification run whose resolvers to check (0: the latest with DoQ-verified resolvers)")
	fs.StringVar(&c.TargetsFile, "targets", "", "check the resolvers of this file instead (measure's format: ADDRESS [sni=NAME] [PROTOCOL=PORT[/ALPN] ...])")
	fs.StringVar(&f.protocols, "protocols", "doq,dot,doh", "protocols checked of each resolver (doq, dot, doh)")
	cli.IntVar(fs, &c.MaxQueries, "max-queries", DefaultMaxQueries, 1, 100000, "queries the counting connection sends at most")
	cli.IntVar(fs, &c.Streams, "streams", DefaultStreams, 1, 256, "of those, outstanding at once")
	fs.StringVar(&f.idleWaits, "idle-waits", "1s,2s,5s,10s,20s,40s", "idle periods tried, each on a connection of its own")
	fs.StringVar(&f.tokenAges, "token-ages", "0s,10s,40s", "DoQ: waits after which a NEW_TOKEN token is presented, each with a token of its own, 0s..1h (\"\": none)")
	cli.IntVar(fs, &f.rttSamples, "rtt-samples", rtt.DefaultSamples, 0, rtt.MaxSamples, "DoQ: RTT probes giving the path RTT every handshake is explained against (0: none, the qlog's own RTT)")
	cli.DurationVar(fs, &c.Timeout, "timeout", DefaultTimeout, time.Millisecond, 5*time.Minute, "timeout per exchange (the idle ones get their wait on top)")
	fs.BoolVar(&f.amplification, "amplification", true, "DoQ: one tokenless handshake per Initial size and key share (the amplification budget)")
	fs.StringVar(&f.sizes, "initial-sizes", "1200,1350,1452", "client Initial sizes of the amplification handshakes, 1200..1452")
	fs.StringVar(&f.keyShares, "key-shares", "x25519,x25519mlkem768", "key shares of the amplification handshakes")
	fs.StringVar(&c.Name, "query-name", "test.com", "query name (A record, RD set)")
	cli.IntVar(fs, &c.Concurrency, "concurrency", DefaultConcurrency, 1, 1024, "endpoints checked at once")
	fs.StringVar(&f.only, "only", "", "check only the resolvers inside these prefixes (comma-separated CIDRs)")
	cli.IntVar(fs, &c.Sample, "sample", 0, 0, math.MaxInt32, "check at most this many resolvers, spread evenly over the address order (0: all)")
	fs.StringVar(&c.BlocklistDir, "blocklist-dir", cli.DefaultBlocklistDir(), "blocklist *.conf files (must exist); their ranges, opt-outs and reserved ranges are never contacted")
	cli.RegisterJSON(fs, &f.JSON, "run (its summary: endpoints, statuses per protocol, Retry policy)")
}

// Resolve checks the flags and returns the run's Config.
func (f *Flags) Resolve() (Config, error) {
	c := f.Config
	c.Vantage, c.VantageLocation, c.VantageContact = f.Vantage.ID, f.Vantage.Location, f.Vantage.Contact
	c.Protocols, c.IdleWaits, c.TokenAges, c.InitialSizes, c.KeyShares = nil, []time.Duration{}, []time.Duration{}, nil, nil
	if c.Week == "" && weekRE.MatchString(os.Getenv("DOQSCAN_RUN_KEY")) {
		c.Week = os.Getenv("DOQSCAN_RUN_KEY")
	}
	if c.Week != "" && !weekRE.MatchString(c.Week) {
		return c, cli.Usagef("--week %q: want YYYY-Www", c.Week)
	}
	for _, p := range cli.SplitList(f.protocols) {
		c.Protocols = append(c.Protocols, measure.Protocol(p))
	}
	for _, w := range cli.SplitList(f.idleWaits) {
		d, err := time.ParseDuration(w)
		if err != nil {
			return c, cli.Usagef("--idle-waits: %q: %v", w, err)
		}
		c.IdleWaits = append(c.IdleWaits, d)
	}
	for _, a := range cli.SplitList(f.tokenAges) {
		d, err := time.ParseDuration(a)
		if err != nil {
			return c, cli.Usagef("--token-ages: %q: %v", a, err)
		}
		c.TokenAges = append(c.TokenAges, d)
	}
	for _, s := range cli.SplitList(f.sizes) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return c, cli.Usagef("--initial-sizes: %q is not a number", s)
		}
		c.InitialSizes = append(c.InitialSizes, n)
	}
	for _, k := range cli.SplitList(f.keyShares) {
		if _, err := measure.KeyShare(k).Curves(); err != nil {
			return c, cli.Usagef("--key-shares: %v (x25519, x25519mlkem768)", err)
		}
		c.KeyShares = append(c.KeyShares, measure.KeyShare(k))
	}
	c.NoAmplification = !f.amplification
	c.RTTSamples = f.rttSamples
	if c.RTTSamples == 0 {
		c.RTTSamples = -1 // Settings: negative is none, 0 the default
	}
	c.Only = nil
	for _, p := range cli.SplitList(f.only) {
		pf, err := netip.ParsePrefix(p)
		if err != nil {
			return c, cli.Usagef("--only: %q is not a prefix (CIDR)", p)
		}
		c.Only = append(c.Only, pf.Masked())
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	if err := cli.CheckBlocklistDir("blocklist-dir", c.BlocklistDir); err != nil {
		return c, err
	}
	if c.TargetsFile != "" && c.TargetsFile != "-" {
		if _, err := os.Stat(c.TargetsFile); err != nil {
			return c, cli.Environmentf("%v", err)
		}
	}
	return c, nil
}

// Command is the conncheck command: resolve the flags, open the store, run, print the
// summary (text, or one JSON line with --json).
func Command(ctx context.Context, log *slog.Logger, f *Flags, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return cli.Usagef("unexpected arguments %q", args)
	}
	cfg, err := f.Resolve()
	if err != nil {
		return err
	}
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	sum, err := Run(ctx, s, cfg, log)
	if sum != nil {
		if f.JSON {
			_ = json.NewEncoder(stdout).Encode(sum) // one line
		} else {
			sum.WriteText(stdout)
		}
	}
	return err
}
