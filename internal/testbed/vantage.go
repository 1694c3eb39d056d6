package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/peers"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// Environment of a test binary re-executed inside a vantage namespace.
const (
	EnvInVantage  = "DOQSCAN_TESTBED_IN_VANTAGE" // "<inst>:<vantage index>"
	EnvPopulation = "DOQSCAN_TESTBED_POPULATION" // population file of the instance
	// EnvNoSimserver says why bin/simserver does not run in the instance (unset when it does).
	EnvNoSimserver = "DOQSCAN_TESTBED_NO_SIMSERVER"
)

var skipReason string // set in the parent when the testbed cannot run

// RunInVantage is for a TestMain: it brings up a testbed (reusing the instance named by
// $DOQSCAN_TESTNET if set, else a fresh instance of its own, removed afterwards),
// re-executes the test binary inside vantage o.Vantage's namespace so that every test
// runs there, and returns the exit code:
//
//	func TestMain(m *testing.M) { os.Exit(testbed.RunInVantage(m, testbed.Options{Servers: true})) }
//
// When the testbed cannot run here (not root, no ip, no /dev/net/tun), the tests run in
// place and Require skips them with the reason; when it can but fails to come up, the
// run fails. PostgreSQL is reached over
// its Unix socket, so storetest works inside the namespace.
func RunInVantage(m *testing.M, o Options) int {
	if os.Getenv(EnvInVantage) != "" {
		return m.Run() // the child, inside the namespace
	}
	if err := Preflight(); err != nil {
		skipReason = err.Error()
		return m.Run()
	}
	if o.Name == "" && os.Getenv(netns.EnvInstance) == "" {
		o.Name = fmt.Sprintf("t%d", os.Getpid()%1000000)
	}
	ctx := context.Background()
	tb, err := Ensure(ctx, o)
	if err != nil {
		// The machine can run a testbed but this one failed: that is a failure, not a skip.
		fmt.Fprintf(os.Stderr, "FAIL: testbed did not come up: %v\n", err)
		if o.Name != "" && os.Getenv(netns.EnvInstance) == "" {
			_ = Down(ctx, o)
		}
		return 1
	}
	defer func() {
		if err := tb.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "testbed: teardown of %s failed: %v\n", tb.Name, err)
		}
	}()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		return 1
	}
	cmd := netns.Exec(ctx, tb.Vantage(0), append([]string{exe}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), EnvInVantage+"="+tb.Name+":0", EnvPopulation+"="+tb.Opts.Population,
		netns.EnvInstance+"="+tb.Name)
	if why := tb.noSimserver(); why != "" {
		cmd.Env = append(cmd.Env, EnvNoSimserver+"="+why)
	}
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	fmt.Fprintf(os.Stderr, "testbed: running the tests in %s: %v\n", tb.Vantage(0), err)
	return 1
}

// Vantage describes the namespace a test runs in (see Require).
type Vantage struct {
	Instance   string
	Index      int
	Addr       string // 198.18.<index>.2
	GatewayMAC string
	Iface      string
	Population *population.Population // nil without a population file
	// NoSimserver says why bin/simserver does not answer in the internet namespace
	// ("" when it runs); see RequireSimserver.
	NoSimserver string
}

// RequireSimserver skips the test, with the reason, when bin/simserver does not run in
// the instance (not built, or the instance was brought up without servers): its
// addresses would refuse every connection.
func (v *Vantage) RequireSimserver(t testing.TB) {
	t.Helper()
	if v.NoSimserver != "" {
		t.Skipf("SKIP: %s", v.NoSimserver)
	}
}

// noSimserver says why bin/simserver does not run in the instance, or "".
func (tb *Testbed) noSimserver() string {
	if _, alive := readPid(tb.State, simserverName, tb.Inet()); alive {
		return ""
	}
	bin := filepath.Join(tb.Opts.Home, "bin", "simserver")
	switch _, err := os.Stat(bin); {
	case err != nil:
		return fmt.Sprintf("%s is not built (./dev build): the testbed has no simulated servers", bin)
	case !tb.Opts.Servers || tb.Population == nil:
		return "the testbed runs without simulated servers (no population file, or Servers not set)"
	default:
		return "bin/simserver is not running in " + tb.Inet()
	}
}

// Require returns the vantage the test runs in, or skips the test with the reason the
// testbed is unavailable. Use it in tests of a package whose TestMain calls RunInVantage.
func Require(t testing.TB) *Vantage {
	t.Helper()
	v := os.Getenv(EnvInVantage)
	if v == "" {
		if skipReason == "" {
			skipReason = "not running inside a testbed vantage namespace (TestMain must call testbed.RunInVantage)"
		}
		t.Skipf("SKIP: %s", skipReason)
	}
	var name string
	var idx int
	for i := len(v) - 1; i >= 0; i-- {
		if v[i] == ':' {
			name = v[:i]
			idx, _ = strconv.Atoi(v[i+1:])
			break
		}
	}
	in := netns.Instance{Name: name, Vantages: idx + 1}
	vt := &Vantage{Instance: name, Index: idx, Addr: netns.VantageAddr(idx).String(),
		GatewayMAC: netns.GatewayMAC(idx), Iface: in.VantageIf(idx), NoSimserver: os.Getenv(EnvNoSimserver)}
	if p := os.Getenv(EnvPopulation); p != "" {
		pop, err := population.Load(p)
		if err != nil {
			t.Fatalf("testbed population: %v", err)
		}
		vt.Population = pop
	}
	return vt
}

// ForTest brings up a fresh instance for one test (its own name, so parallel runs
// never collide) and removes it when the test ends. It skips the test when the testbed
// cannot run here. Commands run in it through tb.Command.
func ForTest(t testing.TB, o Options) *Testbed {
	t.Helper()
	if err := Preflight(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("t%d", (os.Getpid()*31+int(time.Now().UnixNano()/1000))%1000000)
	}
	ctx := context.Background()
	tb, err := Ensure(ctx, o)
	if err != nil {
		_ = Down(ctx, o)
		t.Fatalf("testbed: %v", err)
	}
	t.Cleanup(func() {
		if err := tb.Close(context.Background()); err != nil {
			t.Errorf("testbed teardown: %v", err)
		}
	})
	return tb
}

// Command returns a command running argv inside vantage i's namespace.
func (tb *Testbed) Command(ctx context.Context, vantage int, argv ...string) *exec.Cmd {
	return netns.Exec(ctx, tb.Vantage(vantage), argv...)
}

// InetCommand returns a command running argv inside the internet namespace.
func (tb *Testbed) InetCommand(ctx context.Context, argv ...string) *exec.Cmd {
	return netns.Exec(ctx, tb.Inet(), argv...)
}

// RequirePopulation is Require for tests that need the population: it also skips the
// test when the testbed runs without a population file, and returns the population.
func RequirePopulation(t testing.TB) (*Vantage, *population.Population) {
	t.Helper()
	v := Require(t)
	if v.Population == nil {
		t.Skip("SKIP: the testbed runs without a population file")
	}
	return v, v.Population
}

// RequirePeer skips a test of rec's address when rec is a third-party peer whose
// address stays silent (PeerSilent).
func RequirePeer(t testing.TB, pop *population.Population, rec *population.Record) {
	t.Helper()
	if err := PeerSilent(t, pop, rec); err != nil {
		t.Skipf("SKIP: %v", err)
	}
}

// PeerSilent returns why rec's address stays silent on the testbed although the
// population lists it, or nil: rec is no third-party peer, or its peer runs. An optional
// peer (peers.Optional) that is not installed leaves only its own address silent; a
// missing required one leaves every peer's (PeersMissing).
func PeerSilent(t testing.TB, pop *population.Population, rec *population.Record) error {
	t.Helper()
	if rec.Peer == "" {
		return nil
	}
	if peers.Optional[peers.Kind(rec.Peer)] {
		root, err := peers.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		if err := peers.Installed(root, peers.Kind(rec.Peer)); err != nil {
			return fmt.Errorf("%s is an optional peer (scripts/install-peers.sh %s), and %w", rec.Peer, rec.Peer, err)
		}
	}
	if err := PeersMissing(t, pop); err != nil {
		return fmt.Errorf("the testbed starts the required third-party peers all or none, and %w", err)
	}
	return nil
}

// PeersMissing returns why the testbed starts none of pop's third-party peers (one of
// them is not installed: peers.StartPopulation fails with ErrNotInstalled and the
// testbed leaves their addresses silent), or nil: an installed set must answer. Optional
// peers (peers.Optional) do not count: RequirePeer skips their records when they are
// not installed.
func PeersMissing(t testing.TB, pop *population.Population) error {
	t.Helper()
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range pop.AllRecords() {
		if r.Peer == "" || peers.Optional[peers.Kind(r.Peer)] {
			continue
		}
		if err := peers.Installed(root, peers.Kind(r.Peer)); err != nil {
			return err
		}
	}
	return nil
}
