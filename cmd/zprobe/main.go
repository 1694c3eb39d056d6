// Command zprobe is the weekly scan of doqscan: zmap's udp module sends a VN-forcing QUIC
// Initial to UDP/784, 853 and 8853 and a DNS query to UDP/53, and every reply is
// classified and stored while zmap runs. Its logic lives in internal/probe; this main
// only parses flags.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/probe"
	"github.com/doqscan/doqscan/internal/quicver"
)

var cmd = cli.Command{
	Name:    "zprobe",
	Summary: "scan for QUIC (UDP/784, 853, 8853) and DNS (UDP/53) with zmap; classify and store every reply",
	Usage:   "zprobe [flags] scan|send|ingest|probes|blocklist [subcommand flags]",
	Examples: []string{
		"zprobe scan --vantage dq --testbed 198.19.0.0/16 --rate 50000      # the testbed's whole /16, all four ports",
		"zprobe scan --vantage fra1 --allowlist targets.conf --rate 40000 --seed 42 --shards 4 --shard 0",
		"zprobe scan --vantage fra1 --internet-wide --bandwidth 1G --seed 42   # the real weekly scan (deliberate)",
		"zprobe send --vantage fra1 --hitlist v6.txt --allowlist v6-allow.conf --rate 500  # built-in sender, IPv6 too",
		"zprobe ingest var/scans/2026-W47/fra1/weekly-shard0/853.csv   # replay a raw zmap output (idempotent)",
		"zprobe probes --write probes                                  # regenerate probes/",
		"zprobe blocklist --why 198.19.5.1 --testbed 198.19.0.0/16       # is an address excluded, and why",
	},
	Notes: `Subcommands:
  scan       run zmap once per port (needs root, or CAP_NET_RAW, and zmap 2.1.1)
  send       probe an explicit hitlist (IPv4/IPv6) with the built-in rate-limited sender
  ingest     replay raw zmap CSV files kept under var/scans (needs the manifest.json next to them)
  probes     print (or --write) the probe payloads
  blocklist  print the merged blocklist zmap reads, or --why ADDR

Safety: every scan passes zmap a blocklist (-b) made of blocklist/reserved.conf, every other
blocklist/*.conf and the accepted opt-outs in the database. zmap runs only with an allowlist
(-w, from --targets/--allowlist/--testbed) unless --internet-wide is given. --testbed PREFIX
(inside 198.18.0.0/15) re-opens exactly that prefix in the reserved list and nothing else.
Use "zprobe <subcommand> --help" for each subcommand's flags.`,
}

func main() {
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	cli.Main(fs, &common, run)
}

func run(ctx context.Context, log *slog.Logger, args []string) error {
	if len(args) == 0 {
		return cli.Usagef("want a subcommand: scan, send, ingest, probes or blocklist")
	}
	switch args[0] {
	case "scan":
		return runScan(ctx, log, args[1:])
	case "send":
		return runSend(ctx, log, args[1:])
	case "ingest":
		return runIngest(ctx, log, args[1:])
	case "probes":
		return runProbes(args[1:])
	case "blocklist":
		return runBlocklist(ctx, log, args[1:])
	}
	return cli.Usagef("unknown subcommand %q: want scan, send, ingest, probes or blocklist", args[0])
}

// sub is a subcommand's flag set with the shared --help format.
func sub(name, usage string, examples ...string) *flag.FlagSet {
	c := cli.Command{Name: "zprobe " + name, Summary: cmd.Summary, Usage: usage, Examples: examples}
	fs := flag.NewFlagSet("zprobe "+name, flag.ContinueOnError)
	fs.Usage = func() { cli.PrintHelp(fs.Output(), c, fs) }
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	err := cli.Parse(fs, args)
	if err != nil && !strings.Contains(err.Error(), "help shown") {
		return err
	}
	return err
}

// targetFlags are shared by scan, send and blocklist.
type targetFlags struct {
	targets, allowlist, testbed, blocklistDir string
	internetWide                              bool
}

func (t *targetFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.targets, "targets", "", "comma-separated prefixes or addresses to scan (also positional)")
	fs.StringVar(&t.allowlist, "allowlist", "", "file of prefixes to scan (zmap -w format)")
	fs.StringVar(&t.testbed, "testbed", "", "testbed prefix inside 198.18.0.0/15 (e.g. 198.19.0.0/16): re-opened in the reserved list; default target")
	fs.BoolVar(&t.internetWide, "internet-wide", false, "deliberately scan every address not blocklisted (zmap's default target)")
	fs.StringVar(&t.blocklistDir, "blocklist-dir", defaultBlocklistDir(), "directory of blocklist *.conf files")
}

func defaultBlocklistDir() string {
	if h := os.Getenv("DOQSCAN_HOME"); h != "" {
		return filepath.Join(h, "blocklist")
	}
	return "blocklist"
}

func (t *targetFlags) prefixes(positional []string) ([]netip.Prefix, *netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range append(strings.FieldsFunc(t.targets, func(r rune) bool { return r == ',' || r == ' ' }), positional...) {
		p, err := blocklist.ParsePrefix(s)
		if err != nil {
			return nil, nil, cli.Usagef("--targets: %v", err)
		}
		out = append(out, p)
	}
	if t.allowlist != "" {
		ps, err := probe.ReadPrefixFile(t.allowlist)
		if err != nil {
			return nil, nil, cli.Usagef("--allowlist: %v", err)
		}
		out = append(out, ps...)
	}
	var tb *netip.Prefix
	if t.testbed != "" {
		p, err := netip.ParsePrefix(t.testbed)
		if err != nil {
			return nil, nil, cli.Usagef("--testbed: %v", err)
		}
		tb = &p
	}
	return out, tb, nil
}

// probeFlags configure the payloads.
type probeFlags struct {
	version, dcid, scid, qname string
	size                       int
}

func (p *probeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.version, "version", "0x1a2a3a4a", "QUIC version in the probe: a reserved 0x?a?a?a?a (default), 0xffffffff (the original study's) or 0 (dropped by modern stacks)")
	fs.StringVar(&p.dcid, "dcid", "", "probe DCID, 8..20 bytes, as text or hex:... (default \"doqscan-vn-dcid!\")")
	fs.StringVar(&p.scid, "scid", "", "probe SCID, 0..20 bytes, as text or hex:... (default \"doqscan-scid\")")
	fs.IntVar(&p.size, "size", probe.MinInitialDatagram, "QUIC probe datagram size (1200..1472)")
	fs.StringVar(&p.qname, "qname", probe.DefaultQName, "name the DNS probe asks for (A, RD set)")
}

func cid(s string) ([]byte, error) {
	if h, ok := strings.CutPrefix(s, "hex:"); ok {
		return hex.DecodeString(h)
	}
	return []byte(s), nil
}

func (p *probeFlags) build() (probe.QUICProbe, probe.DNSProbe, error) {
	q := probe.DefaultQUICProbe()
	v, err := quicver.Parse(p.version)
	if err != nil {
		return q, probe.DNSProbe{}, cli.Usagef("--version: %v", err)
	}
	q.Version, q.Size = v, p.size
	if p.dcid != "" {
		if q.DCID, err = cid(p.dcid); err != nil {
			return q, probe.DNSProbe{}, cli.Usagef("--dcid: %v", err)
		}
	}
	if p.scid != "" {
		if q.SCID, err = cid(p.scid); err != nil {
			return q, probe.DNSProbe{}, cli.Usagef("--scid: %v", err)
		}
	}
	if err := q.Validate(); err != nil {
		return q, probe.DNSProbe{}, cli.Usagef("%v", err)
	}
	d := probe.DNSProbe{ID: probe.DefaultDNSID, QName: p.qname}
	if _, err := d.Build(); err != nil {
		return q, d, cli.Usagef("--qname: %v", err)
	}
	return q, d, nil
}

func ports(s string) ([]uint16, error) {
	out := []uint16{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 65535 {
			return nil, cli.Usagef("bad port %q", f)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

func defaultVantage() string {
	if v := os.Getenv("DOQSCAN_VANTAGE"); v != "" {
		return v
	}
	return ""
}

func runScan(ctx context.Context, log *slog.Logger, args []string) error {
	fs := sub("scan", "zprobe scan [flags] [PREFIX...]",
		"zprobe scan --vantage dq --testbed 198.19.0.0/16 --rate 50000",
		"zprobe scan --vantage fra1 --internet-wide --bandwidth 1G --seed 42 --shards 2 --shard 1 --json")
	var tf targetFlags
	var pf probeFlags
	tf.register(fs)
	pf.register(fs)
	var (
		vantage, label, week, quicPorts, dnsPorts, out, bandwidth, iface, gw, src, zmapBin, seedS string
		rate, shard, shards, cooldown, probesPer, threads                                         int
		asJSON                                                                                    bool
	)
	fs.StringVar(&vantage, "vantage", defaultVantage(), "vantage point id (env DOQSCAN_VANTAGE)")
	fs.StringVar(&label, "label", "weekly", "scan label (part of the scan's key with week, vantage and shard)")
	fs.StringVar(&week, "week", "", "ISO week of the scan, e.g. 2026-W47 (default: $DOQSCAN_RUN_KEY when jobrun runs a weekly job, else now)")
	fs.StringVar(&quicPorts, "quic-ports", "784,853,8853", "ports probed with the QUIC probe")
	fs.StringVar(&dnsPorts, "dns-ports", "53", "ports probed with the DNS query")
	fs.StringVar(&out, "out", "var/scans", "directory for zmap's raw output (<week>/<vantage>/<label>-shard<N>/<port>.csv)")
	fs.IntVar(&rate, "rate", 0, "zmap -r: packets per second (0: zmap's default, 10000; -1: as fast as zmap can, zmap -r 0)")
	fs.StringVar(&bandwidth, "bandwidth", "", "zmap -B: bits per second with G/M/K suffix")
	fs.StringVar(&seedS, "seed", "", "zmap --seed, shared by every shard of a scan (required with --shards > 1)")
	fs.IntVar(&shards, "shards", 1, "zmap --shards: scanners splitting one scan")
	fs.IntVar(&shard, "shard", 0, "zmap --shard: this scanner's shard (0-indexed)")
	fs.IntVar(&cooldown, "cooldown", 8, "zmap -c: seconds to keep receiving after the last probe")
	fs.IntVar(&probesPer, "probes-per-host", 1, "zmap -P: probes sent to each address")
	fs.IntVar(&threads, "sender-threads", 1, "zmap -T: sender threads")
	fs.StringVar(&iface, "interface", "", "zmap -i (default: from the route to the first target)")
	fs.StringVar(&gw, "gateway-mac", "", "zmap -G (default: the next hop's MAC from the neighbour table)")
	fs.StringVar(&src, "source-ip", "", "zmap -S (default: the route's source address)")
	fs.StringVar(&zmapBin, "zmap", probe.DefaultZmap, "zmap binary")
	fs.BoolVar(&asJSON, "json", false, "print the summary as JSON on stdout")
	if err := parse(fs, args); err != nil {
		return ignoreHelp(err)
	}
	if vantage == "" {
		return cli.Usagef("--vantage is required (or DOQSCAN_VANTAGE)")
	}
	if week == "" {
		week = weekFromRunKey()
	}
	targets, tb, err := tf.prefixes(fs.Args())
	if err != nil {
		return err
	}
	if len(targets) == 0 && tb == nil && !tf.internetWide {
		return cli.Usagef("%v", probe.ErrNoTargets)
	}
	q, d, err := pf.build()
	if err != nil {
		return err
	}
	qp, err := ports(quicPorts)
	if err != nil {
		return err
	}
	dp, err := ports(dnsPorts)
	if err != nil {
		return err
	}
	var seed *uint64
	if seedS != "" {
		v, err := strconv.ParseUint(seedS, 10, 64)
		if err != nil {
			return cli.Usagef("--seed: %v", err)
		}
		seed = &v
	}
	if shards > 1 && seed == nil {
		return cli.Usagef("--shards %d needs one --seed shared by every shard", shards)
	}
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	z := probe.ZmapRun{Binary: zmapBin, Rate: rate, Bandwidth: bandwidth, Interface: iface, GatewayMAC: gw, SourceIP: src,
		Cooldown: cooldown, ProbesPerHost: probesPer, SenderThreads: threads}
	if z.Interface == "" || z.GatewayMAC == "" {
		dst := netip.MustParseAddr("1.1.1.1") // only the route is looked up; no packet goes there
		if tb != nil {
			dst = tb.Addr()
		} else if len(targets) > 0 {
			dst = targets[0].Addr()
		}
		r, err := probe.DiscoverRoute(ctx, dst)
		if err != nil {
			return cli.Environmentf("find the interface and gateway MAC (pass --interface and --gateway-mac): %v", err)
		}
		log.Info("route discovered", "interface", r.Interface, "source", r.SourceIP, "gateway", r.Gateway, "gateway_mac", r.GatewayMAC)
		if z.Interface == "" {
			z.Interface = r.Interface
		}
		if z.GatewayMAC == "" {
			z.GatewayMAC = r.GatewayMAC
		}
		if z.SourceIP == "" {
			z.SourceIP = r.SourceIP
		}
	}
	sum, err := probe.Scan(ctx, probe.ScanConfig{Store: s, Log: log, VantageID: vantage, Label: label, Week: week,
		Shard: shard, Shards: shards, Seed: seed, QUICPorts: qp, DNSPorts: dp, QUIC: q, DNS: d, Targets: targets,
		Testbed: tb, InternetWide: tf.internetWide, BlocklistDir: tf.blocklistDir, OutDir: out, Zmap: z,
		FlushEvery: time.Second})
	if sum != nil {
		printSummary(sum, asJSON)
	}
	return classify(err)
}

func ignoreHelp(err error) error {
	if err != nil && strings.Contains(err.Error(), "help shown") {
		return nil
	}
	return err
}

func classify(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case strings.Contains(err.Error(), "refusing"), strings.Contains(err.Error(), "outside"):
		return cli.Usagef("%v", err)
	case strings.Contains(err.Error(), "zmap not found"):
		return cli.Environmentf("%v", err)
	}
	return err
}

func printSummary(sum *probe.Summary, asJSON bool) {
	if asJSON {
		e := json.NewEncoder(os.Stdout)
		e.SetIndent("", "  ")
		e.Encode(sum) //nolint:errcheck
		return
	}
	probe.PrintSummary(os.Stdout, sum)
}

func runSend(ctx context.Context, log *slog.Logger, args []string) error {
	fs := sub("send", "zprobe send --hitlist FILE [flags]",
		"zprobe send --vantage fra1 --hitlist v6.txt --allowlist v6-allow.conf --rate 500",
		"zprobe send --vantage dq --testbed 198.19.0.0/16 --hitlist known.txt --rate 2000 --json")
	var tf targetFlags
	var pf probeFlags
	tf.register(fs)
	pf.register(fs)
	var vantage, label, week, quicPorts, dnsPorts, hitlist string
	var rate float64
	var cooldown time.Duration
	var asJSON bool
	fs.StringVar(&vantage, "vantage", defaultVantage(), "vantage point id (env DOQSCAN_VANTAGE)")
	fs.StringVar(&label, "label", "hitlist", "scan label")
	fs.StringVar(&week, "week", "", "ISO week (default: now)")
	fs.StringVar(&quicPorts, "quic-ports", "784,853,8853", "ports probed with the QUIC probe")
	fs.StringVar(&dnsPorts, "dns-ports", "53", "ports probed with the DNS query")
	fs.StringVar(&hitlist, "hitlist", "", "file of addresses (IPv4 or IPv6, one a line); each must be inside the allowlist")
	fs.Float64Var(&rate, "rate", 1000, "probes per second")
	fs.DurationVar(&cooldown, "cooldown", 3*time.Second, "wait for replies after the last probe")
	fs.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	if err := parse(fs, args); err != nil {
		return ignoreHelp(err)
	}
	if vantage == "" || hitlist == "" {
		return cli.Usagef("--vantage and --hitlist are required")
	}
	targets, tb, err := tf.prefixes(fs.Args())
	if err != nil {
		return err
	}
	hl, err := probe.ReadHitlist(hitlist)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	q, d, err := pf.build()
	if err != nil {
		return err
	}
	qp, err := ports(quicPorts)
	if err != nil {
		return err
	}
	dp, err := ports(dnsPorts)
	if err != nil {
		return err
	}
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	safety, err := probe.PrepareSafety(ctx, s, targets, tb, tf.internetWide, tf.blocklistDir)
	if err != nil {
		return classify(err)
	}
	sum, err := probe.Send(ctx, probe.SendConfig{Store: s, Log: log, VantageID: vantage, Label: label, Week: week,
		QUICPorts: qp, DNSPorts: dp, QUIC: q, DNS: d, Hitlist: hl, Safety: safety, Rate: rate, Cooldown: cooldown})
	if sum != nil {
		printSummary(sum, asJSON)
	}
	return classify(err)
}

func runIngest(ctx context.Context, log *slog.Logger, args []string) error {
	fs := sub("ingest", "zprobe ingest [--raw] FILE.csv...",
		"zprobe ingest var/scans/2026-W47/fra1/weekly-shard0/*.csv")
	var raw string
	fs.StringVar(&raw, "raw", "", "a raw zmap CSV file kept by a scan (also positional)")
	if err := parse(fs, args); err != nil {
		return ignoreHelp(err)
	}
	files := fs.Args()
	if raw != "" {
		files = append([]string{raw}, files...)
	}
	if len(files) == 0 {
		return cli.Usagef("want at least one raw CSV file")
	}
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, f := range files {
		r, err := probe.Replay(ctx, s, f, log)
		if err != nil {
			return err
		}
		log.Info("replayed", "file", f, "scan_id", r.ScanID, "port", r.Port, "replies", r.Replies, "rows_new", r.Inserted,
			"bad_lines", r.Bad, "by_kind", r.ByKind)
		fmt.Printf("%s: scan %d port %d: %d replies, %d new rows, %d bad lines\n", f, r.ScanID, r.Port, r.Replies, r.Inserted, r.Bad)
	}
	return nil
}

func runProbes(args []string) error {
	fs := sub("probes", "zprobe probes [--write DIR]", "zprobe probes --write probes")
	var dir string
	fs.StringVar(&dir, "write", "", "write the standard probe files into DIR (the repository's probes/)")
	if err := parse(fs, args); err != nil {
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
	os.Stdout.Write(probe.ProbesReadme(files)) //nolint:errcheck
	return nil
}

func runBlocklist(ctx context.Context, log *slog.Logger, args []string) error {
	fs := sub("blocklist", "zprobe blocklist [--why ADDR] [--no-db] [flags]",
		"zprobe blocklist > /tmp/bl.conf",
		"zprobe blocklist --why 198.19.5.1 --testbed 198.19.0.0/16")
	var tf targetFlags
	tf.register(fs)
	var why string
	var noDB bool
	fs.StringVar(&why, "why", "", "say whether ADDR is excluded and by which entries")
	fs.BoolVar(&noDB, "no-db", false, "leave out the database's opt-outs")
	if err := parse(fs, args); err != nil {
		return ignoreHelp(err)
	}
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
		if opt, err = probe.OptOuts(ctx, s); err != nil {
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

// weekFromRunKey is the ISO week jobrun runs a weekly job for ($DOQSCAN_RUN_KEY,
// "2026-W47"), or "" outside jobrun or for an hourly key.
func weekFromRunKey() string {
	k := os.Getenv("DOQSCAN_RUN_KEY")
	if regexp.MustCompile(`^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$`).MatchString(k) {
		return k
	}
	return ""
}
