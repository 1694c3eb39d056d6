// Package command is cmd/zprobe's flag handling: one function per subcommand (scan,
// send, ingest, probes, blocklist) that parses its flags and calls internal/probe.
package command

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/probe"
	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/store"
)

// Tool is zprobe: its subcommands, each with its flags (scanFlags, sendFlags, ...) and
// the usage and examples of its --help.
func Tool() *cli.Tool {
	return &cli.Tool{Command: Cmd, Subcommands: []cli.Subcommand{
		{Name: "scan", Summary: "run zmap once per port (needs root, or CAP_NET_RAW, and zmap 2.1.1)",
			Usage: "zprobe scan [flags] [PREFIX...]", Locks: scanLocks,
			Examples: []string{"zprobe scan --vantage dq --testbed 198.19.0.0/16 --rate 50000 --cooldown 3",
				"zprobe scan --vantage fra1 --internet-wide --bandwidth 1G --seed 42 --shards 2 --shard 1 --yes --json",
				"zprobe scan --vantage dq --testbed 198.19.0.0/16 --rate 50000 --cooldown 3 --rerun   # send this week's finished ports again (new raw files)"},
			Flags: scanFlags},
		{Name: "send", Summary: "probe an explicit hitlist (IPv4/IPv6) with the built-in rate-limited sender",
			Usage: "zprobe send --hitlist FILE [flags]", Locks: scanLocks,
			Examples: []string{"zprobe send --vantage fra1 --hitlist v6.txt --allowlist v6-allow.conf --rate 200",
				"zprobe send --vantage dq --testbed 198.19.0.0/16 --hitlist known.txt --rate 2000 --json"},
			Flags: sendFlags},
		{Name: "ingest", Summary: "replay raw zmap CSV files kept under var/scans (needs the manifest.json next to them)",
			Usage: "zprobe ingest [--raw] FILE.csv...", Locks: scanLocks,
			Notes:    "ingest says what each file held and settles the port's status (ok only if zmap finished it).",
			Examples: []string{"zprobe ingest var/scans/*/fra1/weekly-shard0/*.csv"},
			Flags:    ingestFlags},
		{Name: "probes", Summary: "print (or --write) the probe payloads",
			Usage:    "zprobe probes [--write DIR]",
			Examples: []string{"zprobe probes --write probes"},
			Flags:    probesFlags},
		{Name: "blocklist", Summary: "print the merged blocklist zmap reads, or --why ADDR",
			Usage: "zprobe blocklist [--why ADDR] [--no-db] [flags]",
			Examples: []string{"zprobe blocklist > /tmp/bl.conf",
				"zprobe blocklist --why 198.19.5.1 --testbed 198.19.0.0/16"},
			Flags: blocklistFlags},
	}}
}

// scanLocks is the unit whose lock scan, send and ingest take.
const scanLocks = "the scan (week, vantage, label, shard; scan, send, ingest)"

// Cmd describes zprobe for --help.
var Cmd = cli.Command{
	Name:    "zprobe",
	Summary: "scan for QUIC (UDP/784, 853, 8853) and DNS (UDP/53) with zmap; classify and store every reply",
	Usage:   "zprobe [flags] scan|send|ingest|probes|blocklist [subcommand flags]",
	Locks:   scanLocks,
	Examples: []string{
		"zprobe scan --vantage dq --testbed 198.19.0.0/16 --rate 50000 --cooldown 3   # the testbed's whole /16, all four ports (paths <= 300 ms)",
		"zprobe scan --vantage fra1 --testbed 198.19.0.0/16 --allowlist targets.conf --rate 40000 --seed 42 --shards 4 --shard 0 --cooldown 3",
		"zprobe scan --vantage fra1 --internet-wide --bandwidth 1G --seed 42   # the real weekly scan (deliberate)",
		"zprobe send --vantage fra1 --hitlist v6.txt --allowlist v6-allow.conf --rate 200  # built-in sender, IPv6 too",
		"zprobe ingest var/scans/*/fra1/weekly-shard0/853.csv        # replay a raw zmap output (idempotent)",
		"zprobe probes --write probes                                  # regenerate probes/",
		"zprobe blocklist --why 198.19.5.1 --testbed 198.19.0.0/16       # is an address excluded, and why",
	},
	Notes: `Safety: every scan passes zmap a blocklist (-b) made of blocklist/reserved.conf, every other
blocklist/*.conf and the accepted opt-outs in the database. zmap runs only with an allowlist
(-w, from --targets/--allowlist/--testbed) unless --internet-wide is given. --testbed PREFIX
(inside 198.18.0.0/15) re-opens exactly that prefix in the reserved list and nothing else.
Rate: zmap always gets an explicit rate, --rate (default 10000 packets/s) or --bandwidth;
--rate 0 is refused (zmap's "no limit"), --rate max asks for it explicitly.
Recovery: the raw CSV is on disk before its rows reach the database. A re-run of the same
scan key does not send again a port that finished, and first ingests the raw file of a
port that did not. With the database away, a scan keeps zmap's output in the raw file,
waits up to --db-wait for the database, then exits 3.`,
}

type runFunc = cli.RunFunc

// targetFlags are shared by scan, send and blocklist.

type targetFlags struct {
	targets, allowlist, testbed, blocklistDir string
	internetWide                              bool
}

func (t *targetFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.targets, "targets", "", "comma-separated prefixes or addresses to scan (also positional)")
	fs.StringVar(&t.allowlist, "allowlist", "", "file of prefixes to scan (zmap -w format)")
	fs.StringVar(&t.testbed, "testbed", "", "testbed prefix inside 198.18.0.0/15 or 2001:2::/48 (e.g. 198.19.0.0/16, 2001:2:0:8000::/49): re-opened in the reserved list; default target")
	fs.BoolVar(&t.internetWide, "internet-wide", false, "deliberately scan every address not blocklisted (zmap's default target)")
	fs.StringVar(&t.blocklistDir, "blocklist-dir", cli.DefaultBlocklistDir(), "directory of blocklist *.conf files (must exist)")
}

// prefixes returns the targets and the testbed prefix, after checking that the
// blocklist directory exists (a missing one is exit code 5, never a scan without it).
func (t *targetFlags) prefixes(positional []string) ([]netip.Prefix, *netip.Prefix, error) {
	if err := cli.CheckBlocklistDir("blocklist-dir", t.blocklistDir); err != nil {
		return nil, nil, err
	}
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
		switch {
		case err != nil:
			// Exit code from the error's type: a file that cannot be opened 5, a bad
			// line 2 (listfile's errors, cli.ExitCode).
			return nil, nil, fmt.Errorf("--allowlist: %w", err)
		case len(ps) == 0:
			// Never fall back to a default target (with --testbed: the whole prefix).
			return nil, nil, cli.Usagef("--allowlist %s lists no prefix or address: refusing to scan without the targets it was meant to name", t.allowlist)
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
	quicPorts, dnsPorts        string
	version, dcid, scid, qname string
	size                       int
}

func (p *probeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.quicPorts, "quic-ports", "784,853,8853", "ports probed with the QUIC probe")
	fs.StringVar(&p.dnsPorts, "dns-ports", "53", "ports probed with the DNS query")
	fs.StringVar(&p.version, "probe-version", "0x1a2a3a4a", "QUIC version in the probe: a reserved 0x?a?a?a?a (default), 0xffffffff (the original study's) or 0 (dropped by modern stacks)")
	fs.StringVar(&p.dcid, "dcid", "", "probe DCID, 8..20 bytes, as text or hex:... (default \"doqscan-vn-dcid!\")")
	fs.StringVar(&p.scid, "scid", "", "probe SCID, 0..20 bytes, as text or hex:... (default \"doqscan-scid\")")
	cli.IntVar(fs, &p.size, "size", probe.MinInitialDatagram, probe.MinInitialDatagram, probe.MaxProbeDatagram, "QUIC probe datagram size")
	fs.StringVar(&p.qname, "query-name", dnsmsg.DefaultQueryName, "name the DNS probe asks for (A, RD set)")
	cli.Deprecate(fs, "qname", "query-name")
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
		return q, probe.DNSProbe{}, cli.Usagef("--probe-version: %v", err)
	}
	q.Version, q.Size = v, p.size
	for _, c := range []struct {
		flag, value string
		id          *[]byte
	}{{"dcid", p.dcid, &q.DCID}, {"scid", p.scid, &q.SCID}} {
		if c.value == "" {
			continue
		}
		if *c.id, err = cid(c.value); err != nil {
			return q, probe.DNSProbe{}, cli.Usagef("--%s: %v", c.flag, err)
		}
	}
	if err := q.Validate(); err != nil {
		return q, probe.DNSProbe{}, cli.Usagef("%v", err)
	}
	d := probe.DNSProbe{ID: probe.DefaultDNSID, QName: p.qname}
	if _, err := d.Build(); err != nil {
		return q, d, cli.Usagef("--query-name: %v", err)
	}
	return q, d, nil
}

// probePorts returns the ports of the QUIC and of the DNS probe.
// payloads are the QUIC and DNS probes and the ports each is sent to, from the flags.
func (p *probeFlags) payloads() (q probe.QUICProbe, d probe.DNSProbe, quicPorts, dnsPorts []uint16, err error) {
	if q, d, err = p.build(); err != nil {
		return q, d, nil, nil, err
	}
	quicPorts, dnsPorts, err = p.probePorts()
	return q, d, quicPorts, dnsPorts, err
}

// openSafe opens the database and builds the safety checks of the targets from it
// (probe.PrepareSafety); the caller closes the store.
func (t *targetFlags) openSafe(ctx context.Context, log *slog.Logger, targets []netip.Prefix, tb *netip.Prefix) (*store.Store, *probe.Safety, error) {
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return nil, nil, err
	}
	safety, err := probe.PrepareSafety(ctx, s, targets, tb, t.internetWide, t.blocklistDir, nil)
	if err != nil {
		s.Close()
		return nil, nil, classify(err)
	}
	return s, safety, nil
}

func (p *probeFlags) probePorts() (quicPorts, dnsPorts []uint16, err error) {
	if quicPorts, err = ports(p.quicPorts); err != nil {
		return nil, nil, err
	}
	if dnsPorts, err = ports(p.dnsPorts); err != nil {
		return nil, nil, err
	}
	return quicPorts, dnsPorts, nil
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

// weekFromRunKey is the ISO week jobrun runs a weekly job for ($DOQSCAN_RUN_KEY,

// "2026-W47"), or "" outside jobrun or for an hourly key.
