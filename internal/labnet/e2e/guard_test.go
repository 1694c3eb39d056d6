// Package e2e checks the lab guard through the commands: measure, verify and zprobe
// (scan and send), handed a lab target (198.19.0.1) in a throwaway network namespace
// whose only route to it leads into a veth pair with both ends inside that namespace
// (labnettest): nothing can leave it, whatever the commands do. Over an unmarked link
// every command refuses with exit code 5 and sends nothing; once the link carries the
// testbed's mark, measure and verify contact the target. Needs root; skips otherwise.
package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/labnet/labnettest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// txPackets is the number of IPv4 packets processes in the namespace have handed to the
// IP layer (Ip: OutRequests of the namespace's /proc/net/snmp). The targets are IPv4, and
// unlike the link's transmit counter it does not count what the kernel sends by itself
// when a link comes up (IPv6 neighbour discovery and MLD reports, which made the link
// counter move by one at random).
func txPackets(t *testing.T, ns *labnettest.Namespace) int64 {
	t.Helper()
	ip, err := testsupport.NetnsSNMP(ns.Name, "Ip")
	if err != nil {
		t.Fatal(err)
	}
	v, ok := ip["OutRequests"]
	if !ok {
		t.Fatalf("no Ip: OutRequests in the namespace's /proc/net/snmp: %v", ip)
	}
	return v
}

func TestCommandsRefuseLabTargetsOutsideTheTestbed(t *testing.T) {
	ns := labnettest.Throwaway(t)
	bin := testsupport.Commands(t, "measure", "verify", "zprobe")
	url := storetest.NewDatabase(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	measureTargets := write("measure.txt", "198.19.0.1\n")
	verifyTargets := write("verify.txt", "198.19.0.1:853\n")
	hitlist := write("hitlist.txt", "198.19.0.1\n")
	measure := []string{"measure", "--vantage", "guard", "--targets", measureTargets, "--protocols", "doudp",
		"--timeout", "300ms", "--rtt-samples", "1", "--blocklist-dir", dir}
	verify := []string{"verify", "--vantage", "guard", "--targets", verifyTargets, "--handshake-timeout", "2s",
		"--target-timeout", "5s", "--retry-timeouts=false", "--blocklist-dir", dir}
	commands := [][]string{measure, verify,
		{"zprobe", "scan", "--vantage", "guard", "--testbed", "198.19.0.0/16", "--targets", "198.19.0.0/30",
			"--cooldown", "0", "--out", filepath.Join(dir, "scans"), "--blocklist-dir", dir},
		{"zprobe", "send", "--vantage", "guard", "--testbed", "198.19.0.0/16", "--hitlist", hitlist,
			"--cooldown", "100ms", "--blocklist-dir", dir},
	}
	run := func(argv []string) (int, string) {
		c := ns.Command(append([]string{filepath.Join(bin, argv[0])}, argv[1:]...)...)
		c.Env = append(os.Environ(), "DATABASE_URL="+url)
		out, err := c.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &ee):
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("%s: %v", argv[0], err)
		return 0, ""
	}

	before := txPackets(t, ns)
	for _, argv := range commands {
		name := strings.Join(argv[:2], " ")
		code, out := run(argv)
		if code != cli.ExitEnvironment {
			t.Errorf("%s over an unmarked link: exit %d, want %d (refused)\n%s", name, code, cli.ExitEnvironment, out)
			continue
		}
		for _, want := range []string{"198.18.0.0/15", "interface " + labnettest.Link, "bin/testnet exec --"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: the refusal does not say %q:\n%s", name, want, out)
			}
		}
	}
	if after := txPackets(t, ns); after != before {
		t.Errorf("the refused commands sent %d packets into the link", after-before)
	}

	ns.Mark(t, labnet.Alias("guardtest"))
	for _, argv := range [][]string{measure, verify} {
		before := txPackets(t, ns)
		code, out := run(argv)
		if code != cli.ExitOK {
			t.Errorf("%s over a marked link: exit %d, want 0\n%s", argv[0], code, out)
		}
		if after := txPackets(t, ns); after == before {
			t.Errorf("%s over a marked link sent nothing: the guard still refused?\n%s", argv[0], out)
		}
	}
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, q := range []string{
		`SELECT count(*) FROM measurements WHERE address = '198.19.0.1'`,
		`SELECT count(*) FROM verification_results WHERE address = '198.19.0.1'`,
	} {
		var n int
		if err := s.Pool.QueryRow(context.Background(), q).Scan(&n); err != nil || n == 0 {
			t.Errorf("%s: %d rows (%v), want some once the link is marked", q, n, err)
		}
	}
}
