package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/peers"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// TestFirstReplyToANewAddressIsPrompt: a peer's first reply to an address it has not
// talked to is as prompt as every later one. The peers namespace reaches the testbed
// through the internet namespace's proxy ARP, one neighbour entry per vantage address;
// the kernel delays proxy ARP replies by a random 0..proxy_delay (0.8 s by default), and
// the peer's first reply waits for it (a QUIC client meets one PTO or more there). The
// test's small world: a scratch internet namespace, the peers namespace as
// setupNamespace builds it with a UDP echo at one peer address, and a scratch vantage
// namespace forwarded through the internet namespace with several source addresses,
// each of them new to the peer. There is no delay line: a round trip is microseconds.
func TestFirstReplyToANewAddressIsPrompt(t *testing.T) {
	inst := scratchInternet(t)
	inet, vant := inst+"-inet", inst+"-v"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", vant).Run()
	run("netns", "add", vant)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", vant).Run() })
	sources := []string{"198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5", "198.18.0.6"}
	run("-n", inet, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", vant)
	run("-n", inet, "addr", "add", "198.18.0.1/24", "dev", "v0")
	run("-n", inet, "link", "set", "v0", "up")
	run("-n", vant, "link", "set", "lo", "up")
	run("-n", vant, "link", "set", "v1", "up")
	for _, s := range sources {
		run("-n", vant, "addr", "add", s+"/24", "dev", "v1")
	}
	run("-n", vant, "route", "add", "198.19.0.0/16", "via", "198.18.0.1", "dev", "v1")

	peer := netip.MustParseAddr("198.19.200.7")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := peers.SetupNamespace(ctx, inst, []netip.Addr{peer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Teardown() })
	var echo net.PacketConn
	if err := netns.Do(n.Name(), func() error {
		var err error
		echo, err = net.ListenPacket("udp4", peer.String()+":7")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	testsupport.Echo(echo)

	// A round trip here takes microseconds; 100 ms leaves room for a loaded machine and
	// is an eighth of the default proxy delay's range.
	const bound = 100 * time.Millisecond
	for _, src := range sources {
		var first, second time.Duration
		err := netns.Do(vant, func() error {
			c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(src+":0")),
				net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, 7)))
			if err != nil {
				return err
			}
			defer c.Close()
			rtt := func() (time.Duration, error) {
				start := time.Now()
				if _, err := c.Write([]byte("first contact")); err != nil {
					return 0, err
				}
				c.SetReadDeadline(start.Add(5 * time.Second))
				buf := make([]byte, 64)
				if _, err := c.Read(buf); err != nil {
					return 0, fmt.Errorf("no echo within 5 s: %w", err)
				}
				return time.Since(start), nil
			}
			if first, err = rtt(); err != nil {
				return err
			}
			second, err = rtt()
			return err
		})
		if err != nil {
			t.Fatalf("from %s: %v", src, err)
		}
		t.Logf("from %s: first round trip %v, second %v", src, first, second)
		if first > bound {
			t.Errorf("from %s: the first reply took %v (second %v), want under %v", src, first, second, bound)
		}
	}
}
