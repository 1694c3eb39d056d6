// Package netns builds and removes the testbed's network namespaces with iproute2:
//
//	<inst>-vantage (198.18.0.2/24) ─┐                 ┌─ <inst>-inet: 198.19.0.0/16 AnyIP on lo
//	<inst>-vantage2 (198.18.1.2/24) ┼─ <inst>-router ─┤   (198.18.255.1/31)
//	...                             ┘  tun0 delay line └─ router side 198.18.255.0/31
//	<inst>-db (198.18.254.2/24) ────┘  (with a central database: Instance.DB)
//
// The testbed is dual-stack: beside each IPv4 address the same link carries one of
// 2001:2::/48 (RFC 5180 IPv6 benchmarking space): vantage i 2001:2:0:i::2/64 (gateway
// ::1), router<->internet 2001:2:0:100::1/64 and ::2, and the internet namespace owns
// 2001:2:0:8000::/49 by AnyIP. Router advertisements and address autoconfiguration are
// off on every link (accept_ra=0, autoconf=0), addresses skip duplicate address detection
// (nodad: ready at once), and link-local addresses stay on their link.
//
// Every address is inside 198.18.0.0/15 or 2001:2::/48. No namespace has a default
// route in either family, and no interface of these namespaces connects to the host:
// nothing routes outside. In the router, packets arriving on any veth are steered (ip rule iif ... lookup
// 100) into tun0, where the user-space delay line holds them and writes them back; the
// main table then forwards them. Every link carries the alias "doqscan-testbed:<inst>"
// (labnet.Alias), the mark the tools' lab guard looks for. Setup is idempotent; Down
// removes everything.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"

	"github.com/doqscan/doqscan/internal/labnet"
)

// Addressing plan (docs/testbed.md).
var (
	TestbedPrefix  = netip.MustParsePrefix("198.18.0.0/15")
	InternetPrefix = netip.MustParsePrefix("198.19.0.0/16")
	// VantagePrefix holds the vantage links: vantage i is 198.18.i.2/24.
	VantagePrefix = netip.MustParsePrefix("198.18.0.0/16")
	// DBPrefix is the link of the central database's namespace (Instance.DB): the
	// database at DBAddr, the router at DBGateway. The delay line treats it as the far
	// side of a path, like an internet address: vantage<->database packets get the
	// profile of DBAddr (testnet path set 198.18.254.2 --rtt 80ms --loss 1%).
	DBPrefix  = netip.MustParsePrefix("198.18.254.0/24")
	DBAddr    = netip.MustParseAddr("198.18.254.2")
	DBGateway = netip.MustParseAddr("198.18.254.1")
	// The router<->internet link, a /31 (RFC 3021).
	RouterInetAddr = netip.MustParseAddr("198.18.255.0")
	InetLinkAddr   = netip.MustParseAddr("198.18.255.1")

	// IPv6 (RFC 5180 benchmarking space).
	TestbedPrefix6  = netip.MustParsePrefix("2001:2::/48")
	InternetPrefix6 = netip.MustParsePrefix("2001:2:0:8000::/49")
	// VantagePrefix6 holds the vantage links, 2001:2:0:i::/64.
	VantagePrefix6 = netip.MustParsePrefix("2001:2::/56")
	// The router<->internet link, a /64.
	RouterInetAddr6 = netip.MustParseAddr("2001:2:0:100::1")
	InetLinkAddr6   = netip.MustParseAddr("2001:2:0:100::2")
)

const (
	// DefaultInstance is the instance name when DOQSCAN_TESTNET is unset.
	DefaultInstance = "dq"
	// EnvInstance names the instance to use or reuse.
	EnvInstance = "DOQSCAN_TESTNET"
	// MaxVantages bounds the vantage namespaces (198.18.0..MaxVantages-1.0/24).
	MaxVantages = 100
	// TUN is the delay line's device in the router namespace.
	TUN = "tun0"
	// DelayTable is the policy-routing table that sends everything into TUN.
	DelayTable = "100"
	// delayRulePref is the priority of the "iif <veth> lookup 100" rules.
	delayRulePref = "100"
	// TUNQueueLen is tun0's transmit queue (packets waiting for the delay line's reader).
	TUNQueueLen = "10000"
	// MTU of every link (and of TUN, whose read buffers are sized for it).
	MTU = "1500"
)

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,9}$`)

// Instance names the namespaces and interfaces of one testbed.
type Instance struct {
	Name     string
	Vantages int  // >= 1
	DB       bool // a namespace for a central database (<inst>-db, DBAddr)
}

// ValidName checks an instance name: 1..10 lowercase letters/digits, starting with a
// letter (interface names are at most 15 bytes: "<inst>-r99").
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("bad testbed instance name %q: want 1-10 lowercase letters or digits, starting with a letter", name)
	}
	return nil
}

// New checks the name and vantage count.
func New(name string, vantages int) (Instance, error) {
	if err := ValidName(name); err != nil {
		return Instance{}, err
	}
	if vantages < 1 || vantages > MaxVantages {
		return Instance{}, fmt.Errorf("vantages %d out of range 1..%d", vantages, MaxVantages)
	}
	return Instance{Name: name, Vantages: vantages}, nil
}

// Router, Inet and Vantage name the namespaces. Vantage(0) is "<inst>-vantage",
// Vantage(i>0) is "<inst>-vantage<i+1>".
func (in Instance) Router() string { return in.Name + "-router" }
func (in Instance) Inet() string   { return in.Name + "-inet" }
func (in Instance) Vantage(i int) string {
	if i == 0 {
		return in.Name + "-vantage"
	}
	return fmt.Sprintf("%s-vantage%d", in.Name, i+1)
}

// DBNamespace names the central database's namespace.
func (in Instance) DBNamespace() string { return in.Name + "-db" }

// Namespaces lists every namespace of the instance.
func (in Instance) Namespaces() []string {
	ns := []string{in.Router(), in.Inet()}
	for i := 0; i < in.Vantages; i++ {
		ns = append(ns, in.Vantage(i))
	}
	if in.DB {
		ns = append(ns, in.DBNamespace())
	}
	return ns
}

// VantageIf is vantage i's veth (in the vantage namespace); RouterIf(i) its peer in
// the router. RouterInetIf/InetIf are the router<->internet pair.
func (in Instance) VantageIf(i int) string { return fmt.Sprintf("%s-v%d", in.Name, i) }
func (in Instance) RouterIf(i int) string  { return fmt.Sprintf("%s-r%d", in.Name, i) }
func (in Instance) RouterInetIf() string   { return in.Name + "-ri" }
func (in Instance) InetIf() string         { return in.Name + "-i" }
func (in Instance) DBIf() string           { return in.Name + "-d" }
func (in Instance) RouterDBIf() string     { return in.Name + "-rd" }

// VantageAddr is 198.18.i.2; GatewayAddr 198.18.i.1 (the router side).
func VantageAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i), 2}) }
func GatewayAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i), 1}) }

// VantageAddr6 is 2001:2:0:i::2; GatewayAddr6 2001:2:0:i::1 (the router side).
func VantageAddr6(i int) netip.Addr { return link6(i, 2) }
func GatewayAddr6(i int) netip.Addr { return link6(i, 1) }

func link6(i int, host byte) netip.Addr {
	a := TestbedPrefix6.Addr().As16()
	a[6], a[7], a[15] = byte(i>>8), byte(i), host
	return netip.AddrFrom16(a)
}

// GatewayMAC is the fixed MAC of the router side of vantage i's link (what zmap -G needs);
// VantageMAC the vantage side. Locally administered (02:...).
func GatewayMAC(i int) string { return fmt.Sprintf("02:d9:00:00:%02x:01", i) }
func VantageMAC(i int) string { return fmt.Sprintf("02:d9:00:00:%02x:02", i) }

// Runner runs iproute2 and friends. Commands are logged through Trace when set.
type Runner struct {
	Trace func(args []string, out string, err error)
}

// IP runs `ip args...` and returns its combined output.
func (r Runner) IP(ctx context.Context, args ...string) (string, error) {
	return r.run(ctx, "ip", args...)
}

func (r Runner) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	s := strings.TrimSpace(out.String())
	if r.Trace != nil {
		r.Trace(append([]string{name}, args...), s, err)
	}
	if err != nil {
		return s, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, s)
	}
	return s, nil
}

// Preflight says why the testbed cannot be built here, or nil.
func Preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("the testbed needs root (network namespaces, TUN)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("the testbed needs iproute2's ip command (apt-get install iproute2)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("the testbed needs /dev/net/tun: %w", err)
	}
	return nil
}

// ListNamespaces returns the names of all network namespaces (ip netns list).
func (r Runner) ListNamespaces(ctx context.Context) ([]string, error) {
	out, err := r.IP(ctx, "netns", "list")
	if err != nil {
		return nil, err
	}
	var ns []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			ns = append(ns, f[0])
		}
	}
	return ns, nil
}

// Exists reports which of the instance's namespaces exist.
func (r Runner) Exists(ctx context.Context, in Instance) (map[string]bool, error) {
	all, err := r.ListNamespaces(ctx)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, n := range all {
		have[n] = true
	}
	got := map[string]bool{}
	for _, n := range in.Namespaces() {
		got[n] = have[n]
	}
	return got, nil
}

// Leftovers lists every namespace named "<inst>-..." (vantages beyond in.Vantages, and
// the peers namespace package peers adds, included). Instance names contain no '-', so
// "<inst>-" never matches another instance.
func (r Runner) Leftovers(ctx context.Context, name string) ([]string, error) {
	all, err := r.ListNamespaces(ctx)
	if err != nil {
		return nil, err
	}
	var left []string
	for _, n := range all {
		if strings.HasPrefix(n, name+"-") {
			left = append(left, n)
		}
	}
	return left, nil
}

func (r Runner) linkExists(ctx context.Context, ns, dev string) bool {
	_, err := r.IP(ctx, "-n", ns, "link", "show", "dev", dev)
	return err == nil
}

func (r Runner) sysctl(ctx context.Context, ns string, kv ...string) error {
	args := append([]string{"netns", "exec", ns, "sysctl", "-q", "-w"}, kv...)
	_, err := r.IP(ctx, args...)
	return err
}

// Up creates (or completes) the namespaces, links, addresses, routes, sysctls and the
// persistent TUN device with its steering rules. It is idempotent.
func (r Runner) Up(ctx context.Context, in Instance) error {
	have, err := r.Exists(ctx, in)
	if err != nil {
		return err
	}
	for _, ns := range in.Namespaces() {
		if !have[ns] {
			if _, err := r.IP(ctx, "netns", "add", ns); err != nil {
				return err
			}
		}
		if _, err := r.IP(ctx, "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
		// Strict reverse-path filtering would drop what the delay line writes back.
		if err := r.sysctl(ctx, ns, "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"); err != nil {
			return err
		}
		// IPv6 without router advertisements, autoconfiguration or redirects: every
		// IPv6 address and route is one Up sets (the defaults apply to links created
		// later; veth sets them per link too).
		if err := r.sysctl(ctx, ns, ipv6Quiet("all", "default")...); err != nil {
			return err
		}
		if err := r.sysctl(ctx, ns, "net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.default.disable_ipv6=0"); err != nil {
			return err
		}
	}
	R, I := in.Router(), in.Inet()
	if err := r.sysctl(ctx, R, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
		return err
	}
	// Links are created inside the namespaces: no interface ever appears on the host.
	for i := 0; i < in.Vantages; i++ {
		if err := r.Veth(ctx, labnet.Alias(in.Name), R, in.RouterIf(i), GatewayMAC(i), in.Vantage(i), in.VantageIf(i), VantageMAC(i)); err != nil {
			return err
		}
	}
	if err := r.Veth(ctx, labnet.Alias(in.Name), R, in.RouterInetIf(), "02:d9:00:00:ff:00", I, in.InetIf(), "02:d9:00:00:ff:01"); err != nil {
		return err
	}
	if in.DB {
		if err := r.Veth(ctx, labnet.Alias(in.Name), R, in.RouterDBIf(), "02:d9:00:00:fe:01", in.DBNamespace(), in.DBIf(), "02:d9:00:00:fe:02"); err != nil {
			return err
		}
	}
	steps := [][]string{}
	add := func(a ...string) { steps = append(steps, a) }
	for i := 0; i < in.Vantages; i++ {
		V := in.Vantage(i)
		add("-n", R, "addr", "replace", GatewayAddr(i).String()+"/24", "dev", in.RouterIf(i))
		add("-n", V, "addr", "replace", VantageAddr(i).String()+"/24", "dev", in.VantageIf(i))
		add("-n", V, "route", "replace", InternetPrefix.String(), "via", GatewayAddr(i).String(), "dev", in.VantageIf(i))
		add("-n", R, "-6", "addr", "replace", GatewayAddr6(i).String()+"/64", "dev", in.RouterIf(i), "nodad")
		add("-n", V, "-6", "addr", "replace", VantageAddr6(i).String()+"/64", "dev", in.VantageIf(i), "nodad")
		add("-n", V, "-6", "route", "replace", InternetPrefix6.String(), "via", GatewayAddr6(i).String(), "dev", in.VantageIf(i))
	}
	if in.DB {
		D := in.DBNamespace()
		add("-n", R, "addr", "replace", DBGateway.String()+"/24", "dev", in.RouterDBIf())
		add("-n", D, "addr", "replace", DBAddr.String()+"/24", "dev", in.DBIf())
		add("-n", D, "route", "replace", VantagePrefix.String(), "via", DBGateway.String(), "dev", in.DBIf())
		for i := 0; i < in.Vantages; i++ {
			add("-n", in.Vantage(i), "route", "replace", DBPrefix.String(), "via", GatewayAddr(i).String(), "dev", in.VantageIf(i))
		}
	}
	add("-n", R, "addr", "replace", RouterInetAddr.String()+"/31", "dev", in.RouterInetIf())
	add("-n", I, "addr", "replace", InetLinkAddr.String()+"/31", "dev", in.InetIf())
	// AnyIP: every address of the /16 is local in the internet namespace.
	add("-n", I, "route", "replace", "local", InternetPrefix.String(), "dev", "lo", "table", "local")
	add("-n", I, "route", "replace", "198.18.0.0/16", "via", RouterInetAddr.String(), "dev", in.InetIf())
	add("-n", R, "route", "replace", InternetPrefix.String(), "via", InetLinkAddr.String(), "dev", in.RouterInetIf())
	add("-n", R, "-6", "addr", "replace", RouterInetAddr6.String()+"/64", "dev", in.RouterInetIf(), "nodad")
	add("-n", I, "-6", "addr", "replace", InetLinkAddr6.String()+"/64", "dev", in.InetIf(), "nodad")
	add("-n", I, "-6", "route", "replace", "local", InternetPrefix6.String(), "dev", "lo", "table", "local")
	add("-n", I, "-6", "route", "replace", VantagePrefix6.String(), "via", RouterInetAddr6.String(), "dev", in.InetIf())
	add("-n", R, "-6", "route", "replace", InternetPrefix6.String(), "via", InetLinkAddr6.String(), "dev", in.RouterInetIf())
	for _, s := range steps {
		if _, err := r.IP(ctx, s...); err != nil {
			return err
		}
	}
	if err := r.delaySteering(ctx, in); err != nil {
		return err
	}
	return r.VerifyNoRouteOut(ctx, in)
}

// Veth joins namespaces nsA and nsB by a veth pair, a (MAC macA) in nsA and b (macB) in
// nsB, brings both ends up marked with alias (labnet.Alias) and keeps IPv6 from
// configuring itself on them. An existing a is kept as it is.
func (r Runner) Veth(ctx context.Context, alias, nsA, a, macA, nsB, b, macB string) error {
	if !r.linkExists(ctx, nsA, a) {
		// A half-built pair (peer moved away or deleted) cannot exist: veths die in pairs.
		if _, err := r.IP(ctx, "-n", nsA, "link", "add", a, "mtu", MTU, "address", macA, "type", "veth",
			"peer", "name", b, "netns", nsB, "mtu", MTU, "address", macB); err != nil {
			return err
		}
	}
	// The alias marks the link as the testbed's: the lab guard (package labnet) lets a
	// tool contact lab addresses only over marked links.
	if _, err := r.IP(ctx, "-n", nsA, "link", "set", a, "up", "alias", alias); err != nil {
		return err
	}
	if _, err := r.IP(ctx, "-n", nsB, "link", "set", b, "up", "alias", alias); err != nil {
		return err
	}
	if err := r.sysctl(ctx, nsA, append(ipv6Quiet(a), "net.ipv4.conf."+a+".rp_filter=0")...); err != nil {
		return err
	}
	return r.sysctl(ctx, nsB, append(ipv6Quiet(b), "net.ipv4.conf."+b+".rp_filter=0")...)
}

// ipv6Quiet are the sysctls that keep IPv6 on the given conf entries (interfaces, "all",
// "default") from configuring itself: no router advertisements, no autoconfigured
// addresses, no redirects.
func ipv6Quiet(confs ...string) []string {
	var kv []string
	for _, c := range confs {
		p := "net.ipv6.conf." + c + "."
		kv = append(kv, p+"accept_ra=0", p+"autoconf=0", p+"accept_redirects=0")
	}
	return kv
}

// delaySteering creates the persistent TUN device and the rules that send every packet
// arriving on a veth through it. Without a running delay line, forwarded packets are
// dropped at tun0 (traffic to the router itself is delivered by the local table first).
func (r Runner) delaySteering(ctx context.Context, in Instance) error {
	R := in.Router()
	if !r.linkExists(ctx, R, TUN) {
		// multi_queue: the delay line attaches one queue per worker (IFF_MULTI_QUEUE).
		if _, err := r.IP(ctx, "-n", R, "tuntap", "add", "dev", TUN, "mode", "tun", "multi_queue"); err != nil {
			return err
		}
	}
	// A long queue towards the reader absorbs bursts (a zmap scan) while it catches up.
	if _, err := r.IP(ctx, "-n", R, "link", "set", TUN, "mtu", MTU, "txqueuelen", TUNQueueLen, "up", "alias", labnet.Alias(in.Name)); err != nil {
		return err
	}
	if err := r.sysctl(ctx, R, "net.ipv4.conf."+TUN+".rp_filter=0"); err != nil {
		return err
	}
	if err := r.sysctl(ctx, R, ipv6Quiet(TUN)...); err != nil {
		return err
	}
	// Only testbed destinations enter the delay line; anything else finds no route.
	if _, err := r.IP(ctx, "-n", R, "route", "replace", TestbedPrefix.String(), "dev", TUN, "table", DelayTable); err != nil {
		return err
	}
	if _, err := r.IP(ctx, "-n", R, "-6", "route", "replace", TestbedPrefix6.String(), "dev", TUN, "table", DelayTable); err != nil {
		return err
	}
	if err := r.steer(ctx, in, "-4"); err != nil {
		return err
	}
	return r.steer(ctx, in, "-6")
}

// steer adds the rules of one family that send what arrives on a veth to the delay table.
func (r Runner) steer(ctx context.Context, in Instance, family string) error {
	R := in.Router()
	rules, err := r.IP(ctx, "-n", R, family, "rule", "show")
	if err != nil {
		return err
	}
	ifs := []string{in.RouterInetIf()}
	for i := 0; i < in.Vantages; i++ {
		ifs = append(ifs, in.RouterIf(i))
	}
	if in.DB && family == "-4" {
		ifs = append(ifs, in.RouterDBIf())
	}
	for _, ifn := range ifs {
		if strings.Contains(rules, "iif "+ifn+" lookup "+DelayTable) {
			continue
		}
		if _, err := r.IP(ctx, "-n", R, family, "rule", "add", "pref", delayRulePref, "iif", ifn, "lookup", DelayTable); err != nil {
			return err
		}
	}
	return nil
}

// VerifyNoRouteOut checks that no namespace of the instance (every "<inst>-*" namespace,
// the peers namespace included) has a route to anything outside 198.18.0.0/15 or
// 127.0.0.0/8, nor an IPv6 route outside 2001:2::/48, ::1 and the link-local and
// multicast routes every IPv6 link has (fe80::/64, ff00::/8, which never leave the
// link), in any table: no default route in either family, nothing else.
func (r Runner) VerifyNoRouteOut(ctx context.Context, in Instance) error {
	all, err := r.Leftovers(ctx, in.Name)
	if err != nil {
		return err
	}
	for _, ns := range all {
		for _, family := range []string{"-4", "-6"} {
			out, err := r.IP(ctx, "-n", ns, family, "route", "show", "table", "all")
			if err != nil {
				return err
			}
			for _, line := range strings.Split(out, "\n") {
				if err := checkRoute(family, line); err != nil {
					return fmt.Errorf("namespace %s: %w", ns, err)
				}
			}
		}
	}
	return nil
}

// routeTypes are the route types iproute2 prints before the destination.
var routeTypes = map[string]bool{"local": true, "broadcast": true, "unreachable": true, "prohibit": true,
	"blackhole": true, "anycast": true, "multicast": true, "throw": true, "unicast": true}

var (
	loopback4  = netip.MustParsePrefix("127.0.0.0/8")
	loopback6  = netip.MustParsePrefix("::1/128")
	linkLocal6 = netip.MustParsePrefix("fe80::/64")
	multicast6 = netip.MustParsePrefix("ff00::/8")
)

// checkRoute says why one line of `ip -4|-6 route show table all` leads outside the
// testbed, or nil.
func checkRoute(family, line string) error {
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil
	}
	dst := f[0]
	if routeTypes[dst] {
		if len(f) < 2 {
			return nil
		}
		dst = f[1]
	}
	if dst == "default" {
		return fmt.Errorf("a default route: %q", line)
	}
	p, err := netip.ParsePrefix(dst)
	if err != nil {
		a, aerr := netip.ParseAddr(dst)
		if aerr != nil {
			return fmt.Errorf("cannot read route %q", line)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	inside := func(outer netip.Prefix) bool { return outer.Contains(p.Addr()) && p.Bits() >= outer.Bits() }
	if family == "-4" {
		if !p.Addr().Is4() || !(inside(TestbedPrefix) || inside(loopback4)) {
			return fmt.Errorf("a route outside %v: %q", TestbedPrefix, line)
		}
		return nil
	}
	if !p.Addr().Is6() || !(inside(TestbedPrefix6) || inside(loopback6) || inside(linkLocal6) || inside(multicast6)) {
		return fmt.Errorf("an IPv6 route outside %v: %q", TestbedPrefix6, line)
	}
	return nil
}

// VerifyHostNoLabRoute checks that the host namespace (the caller's) has no route of its
// own into the lab prefixes: lab traffic belongs in the testbed's namespaces only. A
// default route is the host's business (the tools' lab guard refuses to use it).
func (r Runner) VerifyHostNoLabRoute(ctx context.Context) error {
	for _, c := range []struct {
		family string
		lab    netip.Prefix
	}{{"-4", TestbedPrefix}, {"-6", TestbedPrefix6}} {
		out, err := r.IP(ctx, c.family, "route", "show", "table", "all")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			dst := f[0]
			if routeTypes[dst] && len(f) > 1 {
				dst = f[1]
			}
			p, err := netip.ParsePrefix(dst)
			if err != nil {
				a, aerr := netip.ParseAddr(dst)
				if aerr != nil {
					continue // "default" and the like
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			if p.Bits() > 0 && p.Overlaps(c.lab) {
				return fmt.Errorf("the host namespace has a route into %v: %q", c.lab, line)
			}
		}
	}
	return nil
}

// Down deletes the instance's namespaces (and with them every veth and tun0). Processes
// still inside must have been stopped before (see PIDs).
func (r Runner) Down(ctx context.Context, name string) error {
	left, err := r.Leftovers(ctx, name)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range left {
		if _, err := r.IP(ctx, "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PIDs lists the processes running in a namespace (ip netns pids).
func (r Runner) PIDs(ctx context.Context, ns string) ([]int, error) {
	out, err := r.IP(ctx, "netns", "pids", ns)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		var p int
		if _, err := fmt.Sscan(f, &p); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// Exec returns a command running argv inside namespace ns; it is killed (SIGKILL) when
// ctx ends.
func Exec(ctx context.Context, ns string, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", execArgs(ns, argv)...)
}

// Command returns a command running argv inside namespace ns, bound to no context: the
// caller decides how it ends (testnet exec runs it with cli.RunChild, which forwards
// signals and waits).
func Command(ns string, argv ...string) *exec.Cmd {
	return exec.Command("ip", execArgs(ns, argv)...)
}

// execArgs is `ip netns exec ns argv...`: ip switches namespaces and then execs argv
// (no fork), so the command is ip's own process.
func execArgs(ns string, argv []string) []string {
	return append([]string{"netns", "exec", ns}, argv...)
}

// CutDB cuts (or, with cut false, restores) the path between vantage i and the central
// database: a blackhole route in the vantage namespace drops every packet it sends
// there, as a broken link would (nothing answers, connections time out).
func (r Runner) CutDB(ctx context.Context, in Instance, i int, cut bool) error {
	if cut {
		_, err := r.IP(ctx, "-n", in.Vantage(i), "route", "replace", "blackhole", DBAddr.String()+"/32")
		return err
	}
	_, err := r.IP(ctx, "-n", in.Vantage(i), "route", "del", "blackhole", DBAddr.String()+"/32")
	return err
}
