// Package testbed runs the simulated internet doqscan is built and tested against:
// network namespaces (package netns), the user-space delay line in the router
// (package delayline), the project's simulated servers (bin/simserver) and third-party
// peers (package peers) in the internet namespace. cmd/testnet is its command line;
// integration tests use Ensure, RunInVantage and Require. See docs/testbed.md.
package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/testbed/delayline"
	"github.com/doqscan/doqscan/internal/testbed/geodb"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/peers"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// Options configure an instance.
type Options struct {
	Name     string // instance; default $DOQSCAN_TESTNET, else "dq"
	Vantages int    // vantage namespaces; default 1
	// VantageRTT[i] is an extra round trip for vantage i (applied by the delay line).
	VantageRTT map[int]time.Duration
	// Population is the population file; "" means <home>/testbed/population.txt when it
	// exists, NoPopulation none. Its path profiles feed the delay line; simserver and peers serve it.
	Population string
	// Paths, if set, replaces the population's path profiles (tests and benchmarks).
	Paths *delayline.Table
	// Servers starts bin/simserver and the peers (when a population is given).
	Servers bool
	// DB adds the central database's namespace and starts a PostgreSQL there for a fleet
	// of vantage points (db.go).
	DB      bool
	NoPeers bool   // with Servers: start bin/simserver only
	Seed    uint64 // delay-line RNG seed (loss, jitter); default 1
	// Lead: see delayline.Config.Lead. 0 means DefaultLead; negative means none.
	Lead time.Duration
	// Queues and Quantum: see delayline.ServeConfig.Queues and delayline.Config.Quantum
	// (0: the delay line's defaults).
	Queues  int
	Quantum time.Duration
	Home    string // project home; default home.Dir()
	Log     *slog.Logger
	// ReadyTimeout bounds each process's start; default 60 s.
	ReadyTimeout time.Duration
}

// Fill sets the default of every option left zero (instance name, one vantage, seed 1,
// the default lead, the project home, ...) and checks the instance name.
func (o *Options) Fill() error {
	if o.Name == "" {
		o.Name = os.Getenv(netns.EnvInstance)
	}
	if o.Name == "" {
		o.Name = netns.DefaultInstance
	}
	if err := netns.ValidName(o.Name); err != nil {
		return err
	}
	if o.Vantages == 0 {
		o.Vantages = 1
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	switch {
	case o.Lead == 0:
		o.Lead = DefaultLead
	case o.Lead < 0:
		o.Lead = 0
	}
	if o.Home == "" {
		o.Home = home.Dir()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	if o.Population == NoPopulation {
		o.Population = ""
	} else if o.Population == "" {
		def := filepath.Join(o.Home, "testbed", "population.txt")
		if _, err := os.Stat(def); err == nil {
			o.Population = def
		}
	}
	return nil
}

// DefaultLead is how early the delay line releases packets by default: it cancels the
// worker's two wake-up latencies (the packet's arrival wakes it, then its deadline) and
// part of the fixed forwarding cost of the path (veths and tun0 twice each way; the 0 ms
// row of bench/delayline.sh, 0.10-0.14 ms per round trip). Calibrated with the
// event-loop line on the 2-vCPU machines under load average 4-6 (bench/delayline.sh,
// idle rows, TCP connect median error): lead 100 µs +0.13..+0.22 ms, 150 µs
// +0.09..+0.14 ms (ping min then 0.03-0.09 ms below the configured RTT: more lead would
// release the fastest packets early). Recalibrate on other machines with
// DOQSCAN_BENCH_LEAD.
const DefaultLead = 150 * time.Microsecond

// NoPopulation as Options.Population runs without a population file.
const NoPopulation = "-"

// Testbed is a running instance.
type Testbed struct {
	netns.Instance
	Opts  Options
	State string // <home>/var/testnet/<inst>
	// Created is true when this Ensure built the instance (and Close should remove it).
	Created bool
	// Population is the parsed population file (nil without one).
	Population *population.Population
	// PeersMissing says which third-party peers the population names are not installed
	// (their addresses stay silent) and how to install them; "" when none is missing.
	PeersMissing string
}

// Manifest is what <state>/instance.json records about a running instance.
type Manifest struct {
	Name       string    `json:"name"`
	Vantages   int       `json:"vantages"`
	Population string    `json:"population,omitempty"`
	Servers    bool      `json:"servers"`
	DB         bool      `json:"db,omitempty"`
	Started    time.Time `json:"started"`
}

// StateDir is where an instance keeps pid files, logs and the path table.
func StateDir(home, name string) string { return filepath.Join(home, "var", "testnet", name) }

// Preflight says why the testbed cannot run here (not root, no ip, no /dev/net/tun).
func Preflight() error { return netns.Preflight() }

// Ensure brings the instance up, or reuses it when it is already up and healthy. It is
// idempotent: it completes a half-built instance and restarts dead processes.
func Ensure(ctx context.Context, o Options) (*Testbed, error) {
	if err := o.Fill(); err != nil {
		return nil, err
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	in, err := netns.New(o.Name, o.Vantages)
	if err != nil {
		return nil, err
	}
	in.DB = o.DB
	tb := &Testbed{Instance: in, Opts: o, State: StateDir(o.Home, o.Name)}
	if err := os.MkdirAll(tb.State, 0o755); err != nil {
		return nil, err
	}
	if o.Population != "" {
		if tb.Population, err = population.Load(o.Population); err != nil {
			return nil, err
		}
	}
	var r netns.Runner
	have, err := r.Exists(ctx, in)
	if err != nil {
		return nil, err
	}
	tb.Created = !have[in.Router()]
	if err := r.Up(ctx, in); err != nil {
		return nil, fmt.Errorf("testbed %s: namespaces: %w", o.Name, err)
	}
	if err := tb.writeTable(); err != nil {
		return nil, err
	}
	if err := tb.writeGeoIP(); err != nil {
		return nil, err
	}
	if err := tb.writeSiblings(); err != nil {
		return nil, err
	}
	if err := tb.ensureDelayLine(ctx); err != nil {
		return nil, err
	}
	if o.Servers && tb.Population != nil {
		if err := tb.ensureServers(ctx); err != nil {
			return nil, err
		}
	}
	if o.DB {
		if err := tb.ensureDB(ctx); err != nil {
			return nil, err
		}
	}
	m := Manifest{Name: o.Name, Vantages: o.Vantages, Population: o.Population, Servers: o.Servers, DB: o.DB,
		Started: time.Now().UTC()}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(tb.State, "instance.json"), append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	o.Log.Info("testbed up", "name", o.Name, "created", tb.Created, "vantages", o.Vantages,
		"population", o.Population, "state", tb.State)
	return tb, nil
}

// GeoIPDir is where Ensure writes the population's GeoIP databases
// (geodb.CityFile, geodb.ASNFile): what verify's --geoip-city/--geoip-asn read.
func (tb *Testbed) GeoIPDir() string { return filepath.Join(tb.State, "geoip") }

// writeGeoIP writes the population's mmdb files, stamped with the population file's
// modification time (the same file gives the same databases).
func (tb *Testbed) writeGeoIP() error {
	if tb.Population == nil {
		return nil
	}
	st, err := os.Stat(tb.Opts.Population)
	if err != nil {
		return fmt.Errorf("testbed %s: geoip: %w", tb.Name, err)
	}
	if _, err := geodb.Write(tb.Population, tb.GeoIPDir(), st.ModTime().UTC().Truncate(time.Second)); err != nil {
		return fmt.Errorf("testbed %s: %w", tb.Name, err)
	}
	return nil
}

// ControlSocket is the delay line's control socket of instance name (run-time path
// overrides: delayline.ControlRequest; `testnet path`).
func ControlSocket(home, name string) string {
	return filepath.Join(StateDir(home, name), "delayline.sock")
}

// SetPath overrides the emulated path of an address or prefix while the instance runs
// (attrs as in the table file: "loss=0.05", "rtt=30ms"; unnamed attributes keep their
// value) and returns the resulting profile line. The change is in effect on return.
func SetPath(ctx context.Context, home, name, prefix string, attrs ...string) (string, error) {
	return delayline.ControlRequest(ctx, ControlSocket(home, name), "set "+prefix+" "+strings.Join(attrs, " "))
}

// ResetPaths drops the run-time override of prefix, or every override when prefix is "".
func ResetPaths(ctx context.Context, home, name, prefix string) error {
	_, err := delayline.ControlRequest(ctx, ControlSocket(home, name), strings.TrimSpace("reset "+prefix))
	return err
}

// SiblingsPath is the CSV of the population's declared dual-stack pairs (address4,
// address6; from twin=) that Ensure writes: the analysis's siblings file.
func (tb *Testbed) SiblingsPath() string { return filepath.Join(tb.State, "siblings.csv") }

// Hitlist6Path is the IPv6 hitlist Ensure writes (every listed address of the
// population's IPv6 half, one a line): what `zprobe send --hitlist` reads, as an IPv6
// hitlist service's list would be for the real internet.
func (tb *Testbed) Hitlist6Path() string { return filepath.Join(tb.State, "hitlist6.txt") }

// writeSiblings writes SiblingsPath from the population's twins and Hitlist6Path.
func (tb *Testbed) writeSiblings() error {
	if tb.Population == nil {
		return nil
	}
	var h strings.Builder
	h.WriteString("# every listed address of the population's IPv6 half\n")
	for a := range tb.Population.IPv6().Hosts {
		fmt.Fprintf(&h, "%s\n", a)
	}
	if err := os.WriteFile(tb.Hitlist6Path(), []byte(h.String()), 0o644); err != nil {
		return fmt.Errorf("testbed %s: IPv6 hitlist: %w", tb.Name, err)
	}
	var b strings.Builder
	b.WriteString("# dual-stack servers of the population (twin=): one server, two addresses\naddress4,address6\n")
	for _, r := range tb.Population.Records6 {
		if r.Twin.IsValid() {
			fmt.Fprintf(&b, "%s,%s\n", r.Twin, r.Prefix.Addr())
		}
	}
	if err := os.WriteFile(tb.SiblingsPath(), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("testbed %s: siblings: %w", tb.Name, err)
	}
	return nil
}

// TablePath is the delay line's path table file.
func (tb *Testbed) TablePath() string { return filepath.Join(tb.State, "paths.txt") }

// PathTable returns the table the delay line runs with: Options.Paths, else the
// population's path profiles, else zero delay.
func (tb *Testbed) PathTable() *delayline.Table {
	t := tb.Opts.Paths
	if t == nil {
		t = delayline.NewTable(delayline.Profile{})
		if tb.Population != nil {
			t = TableFromPopulation(tb.Population)
		}
	}
	for i, d := range tb.Opts.VantageRTT {
		t.Vantage[i] = d / 2
	}
	return t
}

// TableFromPopulation turns the population's path profiles into a delay-line table:
// one prefix entry per host record of either family, the default path for everything else.
func TableFromPopulation(p *population.Population) *delayline.Table {
	prof := func(pa population.Path) delayline.Profile {
		return delayline.Profile{OneWay: pa.OneWay(), Jitter: pa.Jitter, Loss: pa.Loss}
	}
	t := delayline.NewTable(prof(p.Paths[p.DefaultPath]))
	for _, r := range p.AllRecords() {
		if r.Path != "" && r.Path != p.DefaultPath {
			t.Set(r.Prefix, prof(p.Paths[r.Path]))
		}
	}
	return t
}

func (tb *Testbed) writeTable() error {
	f, err := os.Create(tb.TablePath() + ".tmp")
	if err != nil {
		return err
	}
	if _, err := tb.PathTable().WriteTo(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tb.TablePath()+".tmp", tb.TablePath())
}

const delaylineName = "delayline"

// DelayLinePid returns the delay line's pid and whether it runs (in the router namespace).
func (tb *Testbed) DelayLinePid() (pid int, alive bool) {
	return readPid(tb.State, delaylineName, tb.Router())
}

func (tb *Testbed) ensureDelayLine(ctx context.Context) error {
	if pid, alive := readPid(tb.State, delaylineName, tb.Router()); alive {
		// Running: make it re-read the table (it may have changed).
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Signal(sighup)
		}
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	svc := service{
		Name: delaylineName,
		NS:   tb.Router(),
		Argv: []string{exe, "delayline",
			"--tun", netns.TUN,
			"--table", tb.TablePath(),
			"--stats", filepath.Join(tb.State, "delayline.stats.json"),
			"--control", ControlSocket(tb.Opts.Home, tb.Name),
			"--seed", strconv.FormatUint(tb.Opts.Seed, 10),
			"--lead", tb.Opts.Lead.String()},
		Env: []string{EnvChild + "=" + delaylineName},
	}
	if tb.Opts.Queues > 0 {
		svc.Argv = append(svc.Argv, "--queues", strconv.Itoa(tb.Opts.Queues))
	}
	if tb.Opts.Quantum != 0 {
		svc.Argv = append(svc.Argv, "--quantum", tb.Opts.Quantum.String())
	}
	pid, err := start(ctx, tb.State, svc, tb.Opts.ReadyTimeout)
	if err != nil {
		return err
	}
	tb.Opts.Log.Info("delay line started", "pid", pid, "namespace", tb.Router())
	return nil
}

// Servers: bin/simserver in the internet namespace, then the third-party peers.
const simserverName = "simserver"

func (tb *Testbed) ensureServers(ctx context.Context) error {
	bin := filepath.Join(tb.Opts.Home, "bin", "simserver")
	if _, err := os.Stat(bin); err != nil {
		tb.Opts.Log.Warn("bin/simserver not built: the internet namespace has no simulated servers (./dev build)", "path", bin)
	} else if _, alive := readPid(tb.State, simserverName, tb.Inet()); !alive {
		svc := service{
			Name: simserverName,
			NS:   tb.Inet(),
			Argv: []string{bin, "--population", tb.Opts.Population},
			Env:  []string{netns.EnvInstance + "=" + tb.Name},
		}
		pid, err := start(ctx, tb.State, svc, tb.Opts.ReadyTimeout)
		if err != nil {
			return err
		}
		tb.Opts.Log.Info("simserver started", "pid", pid, "namespace", tb.Inet())
	}
	if tb.Opts.NoPeers {
		return nil
	}
	// Third-party peers run in <inst>-peers, routed from <inst>-inet (package peers).
	_, err := peers.StartPopulation(ctx, peers.Config{Inst: tb.Name, Root: tb.Opts.Home,
		RunDir: filepath.Join(tb.State, "peers"), Log: tb.Opts.Log}, tb.Population, "")
	switch {
	case errors.Is(err, peers.ErrNotInstalled):
		tb.PeersMissing = MissingPeersNote(tb.Opts.Home, tb.Population)
		tb.Opts.Log.Warn("third-party peers not installed: their population addresses stay silent", "err", err, "install", "./dev install")
	case err != nil:
		return fmt.Errorf("testbed %s: peers: %w", tb.Name, err)
	}
	return nil
}

// MissingPeersNote says which third-party peers pop names are not installed under home
// (the testbed then starts none of them: all or none), how many addresses stay silent,
// and how to install them; "" when every one is installed.
func MissingPeersNote(home string, pop *population.Population) string {
	if pop == nil {
		return ""
	}
	kinds, _ := peers.Missing(home, pop.AllRecords())
	if len(kinds) == 0 {
		return ""
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	silent := 0
	for _, r := range pop.AllRecords() {
		if r.Peer != "" {
			silent++
		}
	}
	return fmt.Sprintf("third-party peers not installed: %s; the testbed starts its peers all or none, so the %d peer addresses of the population stay silent. "+
		"Install them with ./dev install (or scripts/install-peers.sh; ./dev build builds only bin/*), then run testnet up again",
		strings.Join(names, ", "), silent)
}

// Down stops every process of the instance and removes its namespaces and state. It
// succeeds when nothing is there.
func Down(ctx context.Context, o Options) error {
	if err := o.Fill(); err != nil {
		return err
	}
	if err := Preflight(); err != nil {
		return err
	}
	var r netns.Runner
	state := StateDir(o.Home, o.Name)
	var errs []error
	// Every process in a namespace of the instance was started by the testbed (delay
	// line, simserver, peers in <inst>-peers): stop them all, then delete the namespaces
	// (which removes every veth, tun0 and route with them).
	left, err := r.Leftovers(ctx, o.Name)
	if err != nil {
		return err
	}
	for _, ns := range left {
		errs = append(errs, stopNamespace(ctx, r, ns))
	}
	errs = append(errs, r.Down(ctx, o.Name))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("testbed %s down: %w", o.Name, err)
	}
	if err := os.RemoveAll(state); err != nil {
		return err
	}
	o.Log.Info("testbed down", "name", o.Name)
	return nil
}

// Close removes the instance if Ensure created it.
func (tb *Testbed) Close(ctx context.Context) error {
	if !tb.Created {
		return nil
	}
	return Down(ctx, tb.Opts)
}

// Status is what runs in an instance.
type Status struct {
	Name       string           `json:"name"`
	Namespaces map[string]bool  `json:"namespaces"`
	Processes  []ProcStatus     `json:"processes"`
	DelayLine  *delayline.Stats `json:"delay_line,omitempty"`
	RouteCheck string           `json:"route_check"` // "ok" or why a route leads out
	Healthy    bool             `json:"healthy"`
}

// ProcStatus is one process of the instance.
type ProcStatus struct {
	Name      string `json:"name"`
	Binary    string `json:"binary,omitempty"` // peers: the program (coredns, hickory-dns, python3, ngtcp2 server...)
	Namespace string `json:"namespace"`
	Pid       int    `json:"pid"`
	Alive     bool   `json:"alive"`
}

// GetStatus inspects an instance without changing it.
func GetStatus(ctx context.Context, o Options) (*Status, error) {
	if err := o.Fill(); err != nil {
		return nil, err
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	state := StateDir(o.Home, o.Name)
	if b, err := os.ReadFile(filepath.Join(state, "instance.json")); err == nil {
		var m Manifest
		if json.Unmarshal(b, &m) == nil && m.Vantages > 0 {
			o.Vantages = m.Vantages
		}
	}
	in, err := netns.New(o.Name, o.Vantages)
	if err != nil {
		return nil, err
	}
	var r netns.Runner
	st := &Status{Name: o.Name}
	if st.Namespaces, err = r.Exists(ctx, in); err != nil {
		return nil, err
	}
	st.Healthy = true
	for _, ok := range st.Namespaces {
		st.Healthy = st.Healthy && ok
	}
	for _, p := range []struct{ name, ns string }{{delaylineName, in.Router()}, {simserverName, in.Inet()}} {
		pid, alive := readPid(state, p.name, p.ns)
		if pid == 0 && p.name != delaylineName {
			continue
		}
		st.Processes = append(st.Processes, ProcStatus{Name: p.name, Namespace: p.ns, Pid: pid, Alive: alive})
		st.Healthy = st.Healthy && alive
	}
	// Third-party peers (CoreDNS, hickory, aioquic, ngtcp2, dnsproxy) from their pid files.
	peersRun, err := peers.ListRunning(filepath.Join(state, "peers"))
	if err != nil {
		return nil, err
	}
	for _, p := range peersRun {
		st.Processes = append(st.Processes, ProcStatus{Name: "peer " + p.Name, Binary: p.Binary,
			Namespace: o.Name + "-peers", Pid: p.Pid, Alive: p.Alive})
		st.Healthy = st.Healthy && p.Alive
	}
	if b, err := os.ReadFile(filepath.Join(state, "delayline.stats.json")); err == nil {
		var ds delayline.Stats
		if json.Unmarshal(b, &ds) == nil {
			st.DelayLine = &ds
		}
	}
	st.RouteCheck = "ok"
	if st.Healthy {
		err := r.VerifyNoRouteOut(ctx, in)
		if err == nil {
			err = r.VerifyHostNoLabRoute(ctx)
		}
		if err != nil {
			st.RouteCheck = err.Error()
			st.Healthy = false
		}
	} else {
		st.RouteCheck = "not checked (instance incomplete)"
	}
	return st, nil
}

// VantageAddr is the address of vantage i (198.18.i.2).
func (tb *Testbed) VantageAddr(i int) netip.Addr { return netns.VantageAddr(i) }

// GatewayMAC is the router's MAC on vantage i's link (zmap -G).
func (tb *Testbed) GatewayMAC(i int) string { return netns.GatewayMAC(i) }
