// Package e2e holds the operations end-to-end tests on the simulated internet:
// one scan sharded over two vantage namespaces, one measurement round from both, the
// weekly chain and hourly rounds under jobrun with a compressed clock, and an opt-out
// submitted through the page and honoured by the next scan (observed on the target side);
// and the report on pipeline data, checked against the population (report_test.go).
// They run as root inside the testbed (testbed.RunInVantage) and skip with the reason
// otherwise.
package e2e

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// vantage1RTT is the extra round trip of the second vantage point: it is "further away".
const vantage1RTT = 10 * time.Millisecond

func TestMain(m *testing.M) {
	code := testbed.RunInVantage(m, testbed.Options{Servers: true, NoPeers: true, Vantages: 2,
		VantageRTT: map[int]time.Duration{1: vantage1RTT}})
	commands.Remove() // the commands built for the tests (in the process that ran them)
	os.Exit(code)
}

// repoRoot is the module root.
func repoRoot(t *testing.T) string {
	t.Helper()
	return testsupport.Root()
}

// commands are the project's commands the tests run, built once per test binary.
var commands = testsupport.NewShared("zprobe", "verify", "conncheck", "measure", "jobrun", "optout")

// env is a test's setting: the testbed, a fresh database and the built commands.
type env struct {
	v   *testbed.Vantage
	pop *population.Population
	url string
	s   *store.Store
	bin string
}

func setup(t *testing.T) *env {
	t.Helper()
	v, _ := testbed.RequirePopulation(t)
	if err := exec.Command("ip", "netns", "exec", nsOf(v, 1), "true").Run(); err != nil {
		t.Skipf("no second vantage namespace %s (a reused $DOQSCAN_TESTNET instance with one vantage?): %v", nsOf(v, 1), err)
	}
	v.RequireSimserver(t)
	s, url := storetest.OpenURL(t)
	return &env{v: v, pop: v.Population, url: url, s: s, bin: commands.Dir(t)}
}

func nsOf(v *testbed.Vantage, i int) string { return netns.Instance{Name: v.Instance}.Vantage(i) }

// command runs a project command in vantage i's namespace against the test database.
func (e *env) command(ctx context.Context, vantage int, name string, args ...string) *exec.Cmd {
	argv := append([]string{filepath.Join(e.bin, name)}, args...)
	if vantage != e.v.Index {
		argv = append([]string{"ip", "netns", "exec", nsOf(e.v, vantage)}, argv...)
	}
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env = append(os.Environ(), "DATABASE_URL="+e.url, "DOQSCAN_HOME="+repoRootNoT())
	return c
}

func repoRootNoT() string { return testsupport.Root() }

// run runs a command and fails the test with its output when it fails.
func (e *env) run(t *testing.T, vantage int, name string, args ...string) string {
	t.Helper()
	out, err := e.command(context.Background(), vantage, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, testsupport.Tail(string(out), 40))
	}
	return string(out)
}

func (e *env) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := e.s.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// quietSlash22 picks the /22 of the population with the most QUIC speakers on port
// whose every address has a loss-free, jitter-free path and no third-party peer (the
// tests run without peers): what is sent there arrives, and what answers is known.
func quietSlash22(t *testing.T, pop *population.Population, port uint16) (netip.Prefix, []netip.Addr) {
	t.Helper()
	speakers := map[netip.Prefix][]netip.Addr{}
	for _, a := range pop.QUICSpeakers(port) {
		p := netip.PrefixFrom(a, 22).Masked()
		speakers[p] = append(speakers[p], a)
	}
	var best netip.Prefix
	for p, as := range speakers {
		if !quiet(pop, p) {
			continue
		}
		if !best.IsValid() || len(as) > len(speakers[best]) || (len(as) == len(speakers[best]) && p.Addr().Less(best.Addr())) {
			best = p
		}
	}
	if !best.IsValid() {
		t.Fatalf("the population has no loss-free /22 with QUIC speakers on %d", port)
	}
	return best, speakers[best]
}

func quiet(pop *population.Population, p netip.Prefix) bool {
	for a := p.Addr(); p.Contains(a); a = a.Next() {
		path := pop.PathOf(a)
		if path.Loss > 0 || path.Jitter > 0 {
			return false
		}
		if r := pop.Lookup(a); r != nil && r.Peer != "" {
			return false
		}
	}
	return true
}

// capture records, in the internet namespace, the IPv4 UDP/TCP packets matching filter as
// (source, destination) address pairs: what actually reached the targets.
type capture struct {
	cmd  *exec.Cmd
	done chan []flow
}

type flow struct{ src, dst netip.Addr }

var flowRE = regexp.MustCompile(`IP (\d+\.\d+\.\d+\.\d+)\.\d+ > (\d+\.\d+\.\d+\.\d+)\.\d+: `)

func startCapture(t *testing.T, v *testbed.Vantage, filter string) *capture {
	t.Helper()
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Skip("tcpdump not installed: cannot observe the target side")
	}
	in := netns.Instance{Name: v.Instance}
	cmd := exec.Command("ip", "netns", "exec", in.Inet(), "tcpdump", "-i", in.InetIf(), "-Q", "in", "-n", "-l", "-p", filter)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &capture{cmd: cmd, done: make(chan []flow, 1)}
	errs := bufio.NewScanner(stderr)
	listening := false
	for errs.Scan() {
		if strings.Contains(errs.Text(), "listening on") {
			listening = true
			break
		}
	}
	if !listening {
		cmd.Wait()
		t.Fatal("tcpdump exited before listening")
	}
	go func() {
		for errs.Scan() {
		}
	}()
	go func() {
		var out []flow
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := flowRE.FindStringSubmatch(sc.Text()); m != nil {
				out = append(out, flow{netip.MustParseAddr(m[1]), netip.MustParseAddr(m[2])})
			}
		}
		c.done <- out
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	return c
}

// stop ends the capture (tcpdump flushes on SIGINT) and returns what it saw.
func (c *capture) stop() []flow {
	c.cmd.Process.Signal(os.Interrupt)
	out := <-c.done
	c.cmd.Wait()
	return out
}
