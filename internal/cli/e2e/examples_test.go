package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/certs/certtest"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/datasets"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/optout"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// Where an example runs.
const (
	inVantage = iota // the lab's vantage namespace (the default): what a user runs there
	onHost           // the host: testnet itself, and `bin/testnet exec -- ...` lines
	isolated         // a network namespace of its own (a server that binds every address)
)

// example is one line of a tool's --help "Examples:" section and what running it must
// give. The zero value: run in the vantage namespace of the lab, exit 0.
type example struct {
	help string // the help it is in: "verify", "zprobe scan", ...
	line string // the example, without its comment
	// where it runs (inVantage, onHost, isolated).
	where int
	// code is the exit code it must end with, why says why when it is not 0.
	code int
	why  string
	// until, if set: the example runs until it serves (its output holds until), then
	// gets SIGINT, and must end with code.
	until string
	// orUntil: another output that counts as until's (a state the clock decides).
	orUntil string
	// serves: with until, pages that must answer (HTTP 200, fetched from the example's
	// namespace) before the example gets SIGINT.
	serves []string
	// jsonl: stdout (or the file jsonl names, "-": stdout) is JSON lines, one object per
	// target: each object has every key of keys, and no two objects have the same
	// values of them.
	jsonl string
	keys  []string
	// setup prepares the lab for it (ids an example names, a request to decide).
	setup func(t *testing.T, l *lab)
	// noDB: the example runs with no database to be had: DATABASE_URL names a server
	// that does not exist (so no private cluster is started either), and an example that
	// opened it would stop with exit 3; --no-store needs none.
	noDB bool
	// skip, when it returns a reason, skips the example saying why.
	skip func(l *lab) string
}

// examples are every example of every --help, in the order they run (later ones use
// what earlier ones made: a scan before verify, a verification run before measure).
// TestHelpExamples fails on an example missing here or listed here and in no help.
var examples = []example{
	// The lab itself.
	{help: "testnet", line: "testnet up", where: onHost},
	{help: "testnet", line: "testnet --vantages 2 up", where: onHost},
	{help: "testnet", line: "testnet --vantages 3 --db up", where: onHost},
	{help: "testnet", line: "testnet status", where: onHost},
	{help: "testnet", line: "testnet exec -- ping -c3 198.19.0.1", where: onHost},
	{help: "testnet", line: "testnet --vantage 1 exec -- ip route", where: onHost},
	{help: "testnet", line: "testnet path set 198.19.3.7 --loss 5%", where: onHost},
	{help: "testnet", line: "testnet path set 198.19.3.0/24 --rtt 80ms --jitter 1ms", where: onHost},
	{help: "testnet", line: "testnet path show", where: onHost},
	{help: "testnet", line: "testnet path reset", where: onHost},

	// The database.
	{help: "dbctl", line: "dbctl up"},
	{help: "dbctl", line: `psql "$(dbctl url)"`},
	{help: "dbctl", line: "DATABASE_URL=postgres://u@db/doqscan dbctl status", code: 3,
		why: "no server named db exists in the lab: dbctl says the database is unavailable (exit 3)"},
	{help: "dbctl", line: "dbctl status"},
	{help: "dbctl", line: "dbctl retention --keep 8760h --archive-dir /srv/archive --dry-run"},
	{help: "dbctl", line: "dbctl fleet-init --server-names db.example.net,192.0.2.10"},
	{help: "dbctl", line: "dbctl add-vantage --host db.example.net vp-tokyo"},
	{help: "dbctl", line: "dbctl stop"},

	// Testbed files the later examples read.
	{help: "simserver population", line: "simserver population --seed 1 --out testbed/population.txt"},
	{help: "simserver population", line: "simserver population --seed 7 | grep class=doq-retry"},
	{help: "simserver check", line: "simserver check --population testbed/population.txt"},
	{help: "simserver check", line: `simserver check --json | jq '.records[] | select(.peer != "") | .prefix'`},
	{help: "simserver pki", line: "simserver pki --out var/pki"},
	{help: "simserver geodb", line: "simserver geodb --out var/geoip"},
	{help: "simserver geodb", line: "simserver geodb --out /tmp/g --build-time 2026-11-01T00:00:00Z"},
	{help: "simserver serve", line: "simserver serve --population testbed/population.txt --ready-file /tmp/ready --log-level debug",
		where: isolated, until: "simserver ready"},

	// Scans.
	{help: "zprobe", line: "zprobe probes --write probes"},
	{help: "zprobe blocklist", line: "zprobe blocklist > /tmp/bl.conf"},
	{help: "zprobe", line: "zprobe blocklist --why 198.19.5.1 --testbed 198.19.0.0/16"},
	{help: "zprobe", line: "zprobe scan --vantage fra1 --internet-wide --bandwidth 1G --seed 42", code: 5,
		why: "the lab has no route to the internet: zprobe finds no interface for the scan and stops before sending"},
	{help: "zprobe scan", line: "zprobe scan --vantage fra1 --internet-wide --bandwidth 1G --seed 42 --shards 2 --shard 1 --yes --json", code: 5,
		why: "the lab has no route to the internet: zprobe finds no interface for the scan and stops before sending"},
	{help: "zprobe", line: "zprobe scan --vantage fra1 --testbed 198.19.0.0/16 --allowlist targets.conf --rate 40000 --seed 42 --shards 4 --shard 0 --cooldown 3"},
	{help: "zprobe", line: "zprobe send --vantage fra1 --hitlist v6.txt --allowlist v6-allow.conf --rate 200"},
	{help: "zprobe send", line: "zprobe send --vantage dq --testbed 198.19.0.0/16 --hitlist known.txt --rate 2000 --json",
		jsonl: "-", keys: []string{"ip", "port"}},
	{help: "zprobe", line: "zprobe ingest var/scans/*/fra1/weekly-shard0/853.csv"},
	{help: "zprobe ingest", line: "zprobe ingest var/scans/*/fra1/weekly-shard0/*.csv"},
	{help: "zprobe", line: "zprobe scan --vantage dq --testbed 198.19.0.0/16 --rate 50000 --cooldown 3",
		setup: nextID("scans_scan_id_seq", 12)},
	{help: "zprobe scan", line: "zprobe scan --vantage dq --testbed 198.19.0.0/16 --rate 50000 --cooldown 3 --rerun"},

	// Verification.
	{help: "verify", line: "verify --scan-id 12 --concurrency 500 --rate 2000 --json > results.jsonl",
		jsonl: "results.jsonl", keys: []string{"ip", "port"}, setup: nextID("verification_runs_run_id_seq", 12)},
	{help: "verify", line: "verify"},
	{help: "verify", line: "verify --targets hosts.txt --no-store", noDB: true},
	{help: "verify", line: "verify --targets hosts.txt --label adhoc"},
	{help: "verify", line: "verify --sni-names dns.example,doh.example --roots /etc/ssl/certs/ca-certificates.crt"},
	{help: "verify", line: `verify --week "$(date -u +%G-W%V)" --vantage vp2 --scan-vantage dq --geoip-city var/geoip/GeoLite2-City.mmdb --geoip-asn var/geoip/GeoLite2-ASN.mmdb`},

	// Connection policies of the verified resolvers.
	// (the targets file first: afterwards this week's run holds its resolvers, and
	// conncheck --targets would check none of them again)
	{help: "conncheck", line: "conncheck --targets resolvers.txt --protocols doq --idle-waits 1s,5s --token-ages 0s,5s --max-queries 100"},
	{help: "conncheck", line: "conncheck"},
	{help: "conncheck", line: "conncheck --run-id 12 --week 2026-W47 --concurrency 64"},
	{help: "conncheck", line: "conncheck --amplification=false --json > policies.json", jsonl: "policies.json", keys: []string{"run_id"}},

	// Measurement.
	{help: "measure", line: "measure", setup: nextID("campaigns_campaign_id_seq", 42)},
	// The hour's round is measured by the example before unless the hour turned since:
	// then --every starts the new hour's round (spread over the hour), and its progress
	// line shows the loop at work as well.
	{help: "measure", line: "measure --every 1h", until: "waiting for the next round", orUntil: "msg=progress", code: 130},
	{help: "measure", line: "measure --protocols doq --features --concurrency 16"},
	{help: "measure", line: "measure --targets resolvers.txt --modes fresh,0rtt --key-shares x25519,x25519mlkem768"},
	{help: "measure", line: "measure --vantage vp2 --hour 2026-11-22T04"},
	{help: "measure", line: "measure --targets resolvers.txt --no-store --protocols doudp,doq --json > results.jsonl", noDB: true,
		jsonl: "results.jsonl", keys: []string{"ip"}},
	{help: "measure", line: "measure --targets resolvers.txt --hour 2026-11-22T04 --rerun"},

	// qlogs of those rounds, and of the study.
	{help: "qlogs", line: "qlogs export --campaign 42 --out /tmp/qlogs"},
	{help: "qlogs", line: "qlogs export --vantage vp2 --hour 2026-11-22T04 --out /tmp/qlogs"},
	{help: "qlogs", line: "qlogs analyze client.sqlog old.qlog.gz | jq -c 'select(.cause != \"1rtt\")'"},
	{help: "qlogs", line: "qlogs analyze --rtt 5ms client.sqlog"},
	{help: "qlogs", line: "qlogs analyze ../shared/datasets/dns-analysis-2021/qlog-sample/", skip: needDatasets},

	// The load generator: on servers at the vantage's loopback (lab.local), and on the
	// testbed's dnsproxy peer.
	{help: "dnsbench", line: "dnsbench --count 10000 --workers 16 doudp://127.0.0.1 doq://127.0.0.1:8853"},
	{help: "dnsbench", line: "dnsbench --duration 3s --workers 4 --streams 32 doq://127.0.0.1:8853 doh3://127.0.0.1:8443"},
	{help: "dnsbench", line: "dnsbench --duration 3s --rate 500 --policy fresh dot://127.0.0.1:8853 --json",
		jsonl: "-", keys: []string{"target", "policy"}},
	{help: "dnsbench", line: "dnsbench --count 5000 doq://127.0.0.1:8853 --histogram-csv lat.csv --plot lat.png", skip: needPython},
	{help: "dnsbench", line: "dnsbench --ramp-max 5000 --ramp-loss 0.05 --duration 5s --workers 50 doudp://127.0.0.1"},
	{help: "dnsbench", line: "bin/testnet exec -- bin/dnsbench --duration 3s --queries q.txt doq://198.19.3.7 dot://198.19.3.7 --store --label loss=5%",
		where: onHost, skip: needPeers},
	{help: "dnsbench", line: "bin/testnet exec -- bin/dnsbench --loss-sweep 0,5,20 --duration 3s --store doudp://198.19.3.7 dot://198.19.3.7 doq://198.19.3.7",
		where: onHost, skip: needPeers},

	// Scheduled jobs.
	{help: "jobrun", line: "jobrun --job scan --vantage fra1 -- zprobe scan --testbed 198.19.0.0/16 --rate 50000 --cooldown 3"},
	{help: "jobrun", line: "jobrun --job verify --vantage fra1 -- verify"},
	{help: "jobrun", line: "jobrun --job measure --vantage fra1 -- measure"},

	// The opt-out page and its review.
	{help: "optout", line: "optout --listen :80 --contact noc@example.org", until: "serving the opt-out page",
		serves: []string{"http://198.18.0.2/"}},
	{help: "optout", line: "optout --listen :80 --tls-listen :443 --tls-cert c.pem --tls-key k.pem", until: "serving the opt-out page over TLS",
		serves: []string{"http://198.18.0.2/", "https://198.18.0.2/"}},
	{help: "optout", line: "optout --listen 127.0.0.1:8080 --max-v4-prefix 24", until: "serving the opt-out page",
		serves: []string{"http://127.0.0.1:8080/"}},
	{help: "optout", line: "optout serve --policy review-all", until: "serving the opt-out page", serves: []string{"http://198.18.0.2/"}},
	{help: "optout", line: "optout --rewrite-only"},
	{help: "optout list", line: "optout list --status pending", setup: pendingRequest},
	{help: "optout list", line: "optout list --json"},
	{help: "optout list", line: "optout list --audit"},
	{help: "optout accept", line: "optout accept 42 --reason 'confirmed by phone with the AS contact'", setup: pendingRequest},
	{help: "optout accept", line: "optout accept 42 --actor alice --reason 'asked by the AS contact' --blocklist-dir blocklist", setup: pendingRequest},
	{help: "optout reject", line: "optout reject 42 --reason 'confirmed by phone with the AS contact'", setup: pendingRequest},
	{help: "optout reject", line: "optout reject 42 --actor alice --reason 'asked by the AS contact' --blocklist-dir blocklist", setup: pendingRequest},
	{help: "optout withdraw", line: "optout withdraw 42 --reason 'confirmed by phone with the AS contact'", setup: pendingRequest},
	{help: "optout withdraw", line: "optout withdraw 42 --actor alice --reason 'asked by the AS contact' --blocklist-dir blocklist", setup: pendingRequest},

	// The data release, and another study's data.
	{help: "dataset", line: "dataset export"},
	{help: "dataset", line: "dataset export --weeks 2021-W26,2021-W27 /tmp/release"},
	{help: "dataset", line: "dataset export --vantages vp0 --force /tmp/release"},
	{help: "dataset", line: "dataset import --dry-run DIR"},
	{help: "dataset", line: "dataset import --label pam2022-w03 --vantage pam2022-tum DIR"},
	{help: "dataset", line: "dataset import ../shared/datasets/misc-dns-measurements-2021", skip: needDatasets},
	{help: "dataset", line: "dataset import ../shared/datasets/dns-analysis-2021", skip: needDatasets},

	// The lab goes last.
	{help: "testnet", line: "testnet down", where: onHost},
}

// TestHelpExamples runs every example of every tool's --help and of each subcommand's,
// as a user types it (sh -c, in the working directory of a project home of its own),
// inside the simulated internet: a testbed instance of its own, servers on its vantage
// namespace's loopback for the examples on 127.0.0.1, a fresh database, and the files
// the examples name. Nothing an example sends leaves the lab: it runs in the vantage
// namespace (no route out), on the host only testnet itself. Each must end with the exit
// code its entry in examples says (0 unless it says why), and an example that prints
// results with --json must print JSON lines, one object per target.
func TestHelpExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the help examples run the whole pipeline on a testbed (minutes)")
	}
	if err := testbed.Preflight(); err != nil {
		t.Skipf("SKIP: the help examples run in a testbed: %v", err)
	}
	root := testsupport.Root()
	dirs, err := filepath.Glob(filepath.Join(root, "cmd", "*", "main.go"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cmd/*/main.go (%v)", err)
	}
	var tools []string
	for _, d := range dirs {
		tools = append(tools, filepath.Base(filepath.Dir(d)))
	}
	bin := testsupport.Commands(t, tools...)
	checkExamplesListed(t, bin, tools)
	if t.Failed() {
		return
	}
	l := newLab(t, root, bin, tools)
	for _, ex := range examples {
		t.Run(ex.help+": "+ex.line, func(t *testing.T) { l.run(t, ex) })
	}
}

// checkExamplesListed fails unless the examples of every tool's helps (its own and each
// subcommand's; an example shown by several counts once) are exactly those of the
// examples table, each listed once.
func checkExamplesListed(t *testing.T, bin string, tools []string) {
	t.Helper()
	help := func(argv ...string) string {
		out, _ := exec.Command(filepath.Join(bin, argv[0]), append(argv[1:], "--help")...).CombinedOutput()
		return string(out)
	}
	inHelp := map[string]string{} // tool + line -> the help showing it
	for _, tool := range tools {
		top := help(tool)
		for _, e := range clitest.Examples(top) {
			inHelp[tool+"\x00"+e] = tool
		}
		for _, sub := range clitest.Subcommands(tool, top) {
			for _, e := range clitest.Examples(help(tool, sub)) {
				if _, ok := inHelp[tool+"\x00"+e]; !ok {
					inHelp[tool+"\x00"+e] = tool + " " + sub
				}
			}
		}
	}
	listed := map[string]bool{}
	for _, ex := range examples {
		tool, _, _ := strings.Cut(ex.help, " ")
		k := tool + "\x00" + ex.line
		if listed[k] {
			t.Errorf("examples lists %q twice", ex.line)
		}
		listed[k] = true
		if _, ok := inHelp[k]; !ok {
			t.Errorf("examples lists %q of %s --help, which no help of %s shows", ex.line, ex.help, tool)
		}
	}
	for k, h := range inHelp {
		if !listed[k] {
			_, e, _ := strings.Cut(k, "\x00")
			t.Errorf("%s --help shows the example %q, which examples does not run: add it", h, e)
		}
	}
}

// lab is where the examples run.
type lab struct {
	root, work string
	tb         *testbed.Testbed
	env        []string
	dbURL      string
	peers      string // why the testbed's peers do not answer, "" when they do
}

// Ports of the servers on the vantage's loopback, as the dnsbench examples name them.
var localPorts = measuretest.Ports{UDP: 53, TCP: 53, DoT: 8853, DoQ: 8853, DoH3: 8443}

func newLab(t *testing.T, root, bin string, tools []string) *lab {
	t.Helper()
	base := t.TempDir()
	// The lab's central database (testnet --db) runs as user postgres, which must reach
	// its data directory under the project home.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l := &lab{root: root, work: filepath.Join(base, "work")}
	w := l.work
	for _, d := range []string{"bin", "testbed", "blocklist", "DIR"} {
		if err := os.MkdirAll(filepath.Join(w, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range tools {
		link(t, filepath.Join(bin, tool), filepath.Join(w, "bin", tool))
	}
	for _, rel := range []string{"bin/coredns", "var/peers", ".venv", "analysis"} {
		if _, err := os.Stat(filepath.Join(root, rel)); err == nil {
			link(t, filepath.Join(root, rel), filepath.Join(w, rel))
		}
	}
	if p, err := datasets.Path(""); err == nil {
		link(t, p, filepath.Join(base, "shared", "datasets"))
	}
	write(t, w, "testbed/population.txt", smallPopulation(t, filepath.Join(root, "testbed", "population.txt")))
	confs, _ := filepath.Glob(filepath.Join(root, "blocklist", "*.conf"))
	for _, c := range confs {
		copyFile(t, c, filepath.Join(w, "blocklist", filepath.Base(c)))
	}
	excerpt, _ := filepath.Glob(filepath.Join(root, "internal", "dataset", "testdata", "pam2022-excerpt", "*"))
	for _, e := range excerpt {
		if err := exec.Command("cp", "-r", e, filepath.Join(w, "DIR")).Run(); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, filepath.Join(root, "internal", "measure", "qlogana", "testdata", "normal.sqlog"), filepath.Join(w, "client.sqlog"))
	gz := exec.Command("sh", "-c", "gzip -c "+filepath.Join(root, "internal", "measure", "qlogana", "testdata", "amplification.sqlog")+" > old.qlog.gz")
	gz.Dir = w
	if out, err := gz.CombinedOutput(); err != nil {
		t.Fatalf("gzip: %v %s", err, out)
	}
	leaf, key := certtest.SelfSignedLeaf(t, certtest.ECDSA, "scanner.example")
	if err := certtest.WriteFiles(filepath.Join(w, "c.pem"), filepath.Join(w, "k.pem"), [][]byte{leaf.Raw}, key); err != nil {
		t.Fatal(err)
	}
	// Targets, hitlists and a query file from the population: DoQ resolvers of the
	// behaviour classes, the dnsproxy peer.
	write(t, w, "hosts.txt", "# DoQ resolvers of the testbed\n198.19.1.1\n198.19.1.5:853\n198.19.1.21:784\n198.19.1.9:784 # draft-00\n198.19.1.25:853   # h3 only\n")
	write(t, w, "resolvers.txt", "# resolvers of every protocol\n198.19.1.1 doq=853\n198.19.1.2\n198.19.1.3:784\n")
	write(t, w, "q.txt", "; dnsperf format\ntest.com A\nexample.com AAAA\n")
	write(t, w, "targets.conf", "198.19.1.0/24\n")
	write(t, w, "known.txt", "198.19.1.1\n198.19.1.5\n198.19.1.25\n")

	l.dbURL = storetest.NewDatabase(t)
	name := fmt.Sprintf("ex%d", os.Getpid()%100000)
	l.tb = testbed.ForTest(t, testbed.Options{Name: name, Home: w, Vantages: 2, Servers: true})
	copyFile(t, l.tb.Hitlist6Path(), filepath.Join(w, "v6.txt"))
	write(t, w, "v6-allow.conf", "2001:2:0:8000::/49\n")
	l.peers = l.tb.PeersMissing
	// The servers the dnsbench examples name on 127.0.0.1, on the vantage's loopback.
	if err := netns.Do(l.tb.Vantage(0), func() error {
		measuretest.Start(t, measuretest.Config{Host: "127.0.0.1", Ports: localPorts, Allow0RTT: true})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l.env = append(cleanEnv(), "PATH="+filepath.Join(w, "bin")+":"+os.Getenv("PATH"), "DOQSCAN_HOME="+w,
		netns.EnvInstance+"="+name, "DATABASE_URL="+l.dbURL,
		// The lab's scans are vantage point dq's (zprobe scan --vantage dq): the examples
		// without --vantage run as dq, as a user of the lab would set it.
		cli.EnvVantage+"=dq")
	return l
}

// smallHosts are the hosts of the population the lab keeps: DoQ resolvers of a few
// behaviour classes (RFC 9250, draft-00, several ALPNs, h3 only) and the third-party peers
// (the dnsbench examples name 198.19.3.7, the dnsproxy peer); their IPv6 twins and the
// IPv6-only hosts. A round over the whole population takes minutes per example. A class
// of the population narrower here than there keeps only these addresses (its first, the
// one its IPv6 twin names, and the one the lab's files name): more hosts of a class add
// no behaviour, only time. conncheck, above all, checks every endpoint of the verified
// resolvers for 40 s and more (its longest idle wait), --concurrency of them at once:
// the two /31s of each class halve the batches its examples wait for.
var smallHosts = []netip.Prefix{netip.MustParsePrefix("198.19.1.0/30"), netip.MustParsePrefix("198.19.1.4/31"),
	netip.MustParsePrefix("198.19.1.8/31"), netip.MustParsePrefix("198.19.1.20/31"), netip.MustParsePrefix("198.19.1.24/31"),
	netip.MustParsePrefix("198.19.3.0/24")}

// labMaxRTT is the longest round trip of the lab's paths: the examples are checked for
// their exit codes and output, not for times, and a slow path multiplies every exchange
// of a round: conncheck's counting connection (300 queries, 4 at a time) alone takes 75
// round trips, 23 s on the population's 300 ms path; a measure round goes one exchange
// after the other per target. Jitter and loss stay as the population has them.
const labMaxRTT = 80 * time.Millisecond

// smallPopulation is the population file at path with only the hosts of smallHosts (an
// IPv6 host when its twin is kept or it has none; a host record wider than the prefix of
// smallHosts inside it narrowed to that prefix) and no path slower than labMaxRTT.
func smallPopulation(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// kept is the prefix of smallHosts that overlaps s (an address or a prefix).
	kept := func(s string) (netip.Prefix, bool) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return netip.Prefix{}, false
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		i := slices.IndexFunc(smallHosts, func(h netip.Prefix) bool { return h.Overlaps(p) })
		if i < 0 {
			return netip.Prefix{}, false
		}
		if h := smallHosts[i]; h.Bits() > p.Bits() {
			return h, true
		}
		return p, true
	}
	var out strings.Builder
	hosts, paths := false, false
	for _, line := range strings.SplitAfter(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "["):
			hosts = strings.HasPrefix(line, "[hosts]")
			paths = strings.HasPrefix(line, "[paths]")
		case paths && len(f) > 0 && !strings.HasPrefix(f[0], "#"):
			for _, kv := range f[1:] {
				if v, ok := strings.CutPrefix(kv, "rtt="); ok {
					if d, err := time.ParseDuration(v); err == nil && d > labMaxRTT {
						line = strings.Replace(line, kv, "rtt="+labMaxRTT.String(), 1)
					}
				}
			}
		case !hosts || len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case strings.Contains(f[0], ":"): // IPv6
			twin := ""
			for _, kv := range f[1:] {
				if v, ok := strings.CutPrefix(kv, "twin="); ok {
					twin = v
				}
			}
			if _, ok := kept(twin); twin != "" && !ok {
				continue
			}
		default:
			p, ok := kept(f[0])
			if !ok {
				continue
			}
			if s := p.String(); s != f[0] && strings.HasPrefix(line, f[0]) {
				line = s + line[len(f[0]):]
			}
		}
		out.WriteString(line)
	}
	return out.String()
}

// cleanEnv is the environment without what would point an example elsewhere.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH", k == "DATABASE_URL", strings.HasPrefix(k, "DOQSCAN_"):
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (l *lab) run(t *testing.T, ex example) {
	if ex.skip != nil {
		if why := ex.skip(l); why != "" {
			t.Skipf("SKIP: %s", why)
		}
	}
	env := slices.Clone(l.env)
	if ex.setup != nil {
		ex.setup(t, l)
	}
	if ex.noDB {
		env = withoutDatabase(env)
	}
	script := ex.line
	if ex.until != "" {
		script = "exec " + script // the signal goes to the tool, not to sh
	}
	var argv []string
	switch ex.where {
	case inVantage:
		argv = []string{"ip", "netns", "exec", l.tb.Vantage(0), "sh", "-c", script}
	case onHost:
		argv = []string{"sh", "-c", script}
	case isolated:
		argv = append(testsupport.UnshareNet(), "sh", "-c", script)
		argv = append([]string{"unshare"}, argv...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = l.work, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr testsupport.SyncBuffer
	cmd.Stdout = &stdout
	seen := make(chan struct{})
	if ex.until != "" {
		pr, pw := io.Pipe()
		cmd.Stderr = io.MultiWriter(&stderr, pw)
		go watch(pr, seen, ex.until, ex.orUntil)
		defer pw.Close()
	} else {
		cmd.Stderr = &stderr
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	if ex.until != "" {
		select {
		case <-seen:
			for _, u := range ex.serves {
				l.fetch(t, u)
			}
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			err = <-done
		case err = <-done:
			t.Errorf("ended before it printed %q", ex.until)
		}
	} else {
		err = <-done
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d after %s", code, time.Since(start).Round(time.Millisecond))
	if code != ex.code {
		t.Fatalf("exit %d, want %d %s\nstdout:\n%s\nstderr:\n%s", code, ex.code, ex.why,
			testsupport.Tail(stdout.String(), 2000), testsupport.Tail(stderr.String(), 3000))
	}
	if ex.jsonl != "" {
		out := []byte(stdout.String())
		if ex.jsonl != "-" {
			if out, err = os.ReadFile(filepath.Join(l.work, ex.jsonl)); err != nil {
				t.Fatal(err)
			}
		}
		checkJSONLines(t, out, ex.keys)
	}
}

// fetch gets url from the vantage namespace (a server just started: connections refused
// until it listens are retried, a bounded number of times) and fails unless it answers
// 200.
func (l *lab) fetch(t *testing.T, url string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", l.tb.Vantage(0), "curl", "-ksS", "--retry", "20", "--retry-connrefused",
		"--retry-delay", "1", "-o", "/dev/null", "-w", "%{http_code}", url).CombinedOutput()
	if err != nil || string(out) != "200" {
		t.Errorf("GET %s: %s (%v), want 200", url, out, err)
	}
}

// watch reads r line by line and closes seen at the first line holding one of want;
// it reads on to the end so that the writer never blocks.
func watch(r io.Reader, seen chan struct{}, want ...string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var once sync.Once
	for sc.Scan() {
		if slices.ContainsFunc(want, func(w string) bool { return w != "" && strings.Contains(sc.Text(), w) }) {
			once.Do(func() { close(seen) })
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// checkJSONLines: out is JSON lines, at least one, each an object with every key of
// keys, no two with the same values of them (one object per target).
func checkJSONLines(t *testing.T, out []byte, keys []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("no JSON line on stdout")
	}
	seen := map[string]bool{}
	for i, line := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("line %d is not a JSON object: %v\n%.300s", i+1, err, line)
		}
		var id []string
		for _, k := range keys {
			v, ok := obj[k]
			if !ok {
				t.Fatalf("line %d lacks %q: %.300s", i+1, k, line)
			}
			id = append(id, fmt.Sprint(v))
		}
		if k := strings.Join(id, " "); seen[k] {
			t.Fatalf("line %d: a second object for %s", i+1, k)
		} else {
			seen[k] = true
		}
	}
	t.Logf("%d JSON lines, one per target", len(lines))
}

// nextID makes the next id of a sequence id (the id an example names).
func nextID(seq string, id int64) func(*testing.T, *lab) {
	return func(t *testing.T, l *lab) {
		withStore(t, l, func(s *store.Store) error {
			_, err := s.Pool.Exec(context.Background(), `SELECT setval($1, $2, false)`, seq, id)
			return err
		})
	}
}

// pendingRequest makes opt-out request 42 exist and wait for review, as the page and
// the operator leave it (internal/optout's Submit and Decide, with their audit rows):
// submitted under the review-all policy the first time (the sequence set so that it gets
// id 42); afterwards taken from where the previous example left it back to pending
// (rejected -> accepted -> withdrawn, then submitted again: a withdrawn request
// submitted again waits for review).
func pendingRequest(t *testing.T, l *lab) {
	withStore(t, l, func(s *store.Store) error {
		ctx, now, id := context.Background(), time.Now(), int64(42)
		req, err := optout.Validate("198.19.77.0/24", "noc@operator.example", "help example", optout.DefaultLimits)
		if err != nil {
			return err
		}
		src := netip.MustParseAddr("198.19.77.1")
		submit := func() error {
			e, err := optout.Submit(ctx, s, req, &src, optout.PolicyReviewAll.Decide(req.Prefix, src, optout.DefaultOwnRange), "web "+src.String(), now)
			if err == nil && (e.ID != id || e.Status != optout.StatusPending) {
				err = fmt.Errorf("submitted request is %d %s, want %d pending", e.ID, e.Status, id)
			}
			return err
		}
		e, err := optout.Get(ctx, s, id)
		if errors.Is(err, optout.ErrNoSuchRequest) {
			if _, err := s.Pool.Exec(ctx, `SELECT setval('optout_requests_request_id_seq', $1, false)`, id); err != nil {
				return err
			}
			return submit()
		}
		if err != nil {
			return err
		}
		steps := map[string][]string{
			optout.StatusPending:   nil,
			optout.StatusAccepted:  {optout.ActionWithdraw},
			optout.StatusRejected:  {optout.ActionAccept, optout.ActionWithdraw},
			optout.StatusWithdrawn: {},
		}[e.Status]
		for _, a := range steps {
			if _, err := optout.Decide(ctx, s, id, a, "help-examples", "back to review for the next example", now); err != nil {
				return err
			}
		}
		if e.Status == optout.StatusPending {
			return nil
		}
		return submit()
	})
}

// withoutDatabase is env with a DATABASE_URL that names no server: an example that
// opened a database would fail with exit 3.
func withoutDatabase(env []string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "DATABASE_URL=") })
	return append(out, "DATABASE_URL="+clitest.NoDatabaseURL)
}

func withStore(t *testing.T, l *lab, fn func(*store.Store) error) {
	t.Helper()
	s, err := store.Open(context.Background(), l.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := fn(s); err != nil {
		t.Fatal(err)
	}
}

func needDatasets(*lab) string {
	if _, err := datasets.Path("dns-analysis-2021"); err != nil {
		return "needs the study's datasets: " + err.Error()
	}
	return ""
}

func needPython(l *lab) string {
	if _, err := os.Stat(filepath.Join(l.root, ".venv", "bin", "python")); err != nil {
		return "--plot draws with the project's Python (.venv: ./dev install): " + err.Error()
	}
	return ""
}

func needPeers(l *lab) string {
	if l.peers != "" {
		return "198.19.3.7 is the dnsproxy peer, and " + l.peers
	}
	return ""
}

func link(t *testing.T, target, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
