package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/delayline"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// BenchmarkDelayLine prints configured vs measured RTT (ping, TCP connect) for 5..300 ms
// paths, idle and under a UDP flood, and the packet rate the line sustains. It is a
// report, not a pass/fail test: run it with bench/delayline.sh (or
// go test -run '^$' -bench DelayLine -benchtime 1x ./internal/testbed/).
//
// Environment: DOQSCAN_BENCH_RATE (flood packets/s, default 50000), DOQSCAN_BENCH_LEAD
// (delay-line lead, default testbed.DefaultLead; 0 for none), DOQSCAN_BENCH_PINGS (pings per path,
// default 20), DOQSCAN_BENCH_QUEUES and DOQSCAN_BENCH_QUANTUM (delay-line --queues and
// --quantum; quantum 0 for none), DOQSCAN_BENCH_SECONDS (each throughput run, default 3),
// DOQSCAN_BENCH_ONLY=throughput (skip the RTT table).
func BenchmarkDelayLine(b *testing.B) {
	if err := testbed.Preflight(); err != nil {
		b.Skipf("SKIP: %v", err)
	}
	rate := envInt("DOQSCAN_BENCH_RATE", 50000)
	pings := envInt("DOQSCAN_BENCH_PINGS", 20)
	floodSecs := envInt("DOQSCAN_BENCH_SECONDS", 3)
	lead := envDurationOrNone(b, "DOQSCAN_BENCH_LEAD", testbed.DefaultLead)
	quantum := envDurationOrNone(b, "DOQSCAN_BENCH_QUANTUM", 0)
	queues := envInt("DOQSCAN_BENCH_QUEUES", 0)
	rtts := []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond, 80 * time.Millisecond,
		150 * time.Millisecond, 300 * time.Millisecond}
	tbl := delayline.NewTable(delayline.Profile{})
	for i, rtt := range rtts {
		tbl.Set(netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(10 + i), 0}), 24), delayline.Profile{OneWay: rtt / 2})
	}
	tb := testbed.ForTest(b, testbed.Options{Name: fmt.Sprintf("bn%d", os.Getpid()%100000), Paths: tbl,
		Population: testbed.NoPopulation, Lead: lead, Queues: queues, Quantum: quantum})
	ctx := context.Background()
	tcpServer(b, tb, 9)
	sink := newUDPSink(b, tb, 9999)
	for i := 0; i < b.N; i++ {
		fmt.Printf("\ndelay line benchmark (lead %v, queues %d, quantum %v (0: defaults); %d pings and 10 TCP connects per path; load average %s)\n",
			lead, queues, quantum, pings, testsupport.LoadAverage())
		fmt.Printf("%-10s %-6s %10s %10s %10s %10s %9s\n", "configured", "load", "ping min", "ping avg", "tcp min", "tcp median", "goal 0.5ms")
		phases := []bool{false, true}
		if os.Getenv("DOQSCAN_BENCH_ONLY") == "throughput" {
			phases = nil
		}
		for _, loaded := range phases {
			phase0 := readStats(tb)
			m0 := readMachine()
			var stop context.CancelFunc = func() {}
			floodDone := make(chan struct{})
			if loaded {
				fctx, cancel := context.WithCancel(ctx)
				stop = cancel
				go func() {
					defer close(floodDone)
					_, _ = flood(fctx, tb, "198.19.12.9:9999", rate, 100) // 20 ms path
				}()
			} else {
				close(floodDone)
			}
			for j, rtt := range rtts {
				p, err := ping(ctx, tb, addrFor(j), pings)
				if err != nil {
					b.Fatal(err)
				}
				d, err := tcpConnect(tb, addrFor(j), 9, 10)
				if err != nil {
					b.Fatal(err)
				}
				label := "idle"
				if loaded {
					label = fmt.Sprintf("%dk/s", rate/1000)
				}
				worst := max(absd(p.avg-rtt), absd(median(d)-rtt))
				verdict := "ok"
				if worst > 500*time.Microsecond {
					verdict = "MISS"
				}
				fmt.Printf("%-10v %-6s %10s %10s %10s %10s %9s  (avg err %+.3f ms, tcp err %+.3f ms)\n", rtt, label,
					ms(p.min), ms(p.avg), ms(d[0]), ms(median(d)), verdict,
					float64(p.avg-rtt)/1e6, float64(median(d)-rtt)/1e6)
			}
			stop()
			<-floodDone
			waitStatsTick(tb, phase0)
			phase1 := readStats(tb)
			fmt.Printf("%-17s delay line in this phase: %d releases, lateness mean %.1f µs, max (whole run) %.1f µs, %d over 100 µs, dropped %d, %.2f wake-ups/packet; machine: %s\n", "",
				phase1.Releases-phase0.Releases, meanLate(phase0, phase1), float64(phase1.LateMaxNS)/1e3, phase1.LateOver-phase0.LateOver, phase1.Dropped-phase0.Dropped, wakeups(phase0, phase1), m0.since())
		}
		// Throughput: flood the 20 ms path at increasing rates for 3 s each; count what
		// the internet side receives.
		fmt.Printf("\nthroughput (load average %s)\n%-12s %12s %12s %12s %8s %s\n", testsupport.LoadAverage(), "offered pps", "sent pps", "line pps", "recv pps", "loss", "delay line")
		for _, r := range []int{rate, 2 * rate} {
			before := sink.n.Load()
			st0 := readStats(tb)
			cpu0 := lineCPU(tb)
			k0 := kernelDrops(tb)
			m0 := readMachine()
			fctx, cancel := context.WithTimeout(ctx, time.Duration(floodSecs)*time.Second)
			t0 := time.Now()
			sent, err := flood(fctx, tb, "198.19.12.9:9999", r, 100)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			el := time.Since(t0)
			// Wait for the packets still held (20 ms path) to arrive: the condition is
			// "the sink count stopped growing for 100 ms" (one tick of the stats file is 1 s).
			waitQuiet(sink)
			waitStatsTick(tb, st0)
			got := sink.n.Load() - before
			st1 := readStats(tb)
			cpuPer := float64(lineCPU(tb)-cpu0) / float64(max(st1.Received-st0.Received, 1)) / 1e3
			k1 := kernelDrops(tb)
			fmt.Printf("%-12d %12.0f %12.0f %12.0f %7.2f%% dropped %d, lateness mean %.1f µs, max (whole run) %.1f µs, >100µs %d, max held %d, %.2f wake-ups/packet, line CPU %.1f µs/packet; kernel drops: sink socket %d, backlog %d; machine: %s\n",
				r, float64(sent)/el.Seconds(), float64(st1.Forwarded-st0.Forwarded)/el.Seconds(), float64(got)/el.Seconds(), 100*(1-float64(got)/float64(max(sent, 1))),
				st1.Dropped-st0.Dropped, meanLate(st0, st1), float64(st1.LateMaxNS)/1e3, st1.LateOver-st0.LateOver, st1.MaxHeld, wakeups(st0, st1), cpuPer, k1.rcvbuf-k0.rcvbuf, k1.backlog-k0.backlog, m0.since())
		}
	}
}

// waitStatsTick waits until the delay line's stats file shows counters newer than st0
// (it is rewritten every second).
func waitStatsTick(tb *testbed.Testbed, st0 delayline.Stats) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < 50; i++ {
		if st := readStats(tb); st.Received > st0.Received && st.InFlight == 0 {
			return
		}
		<-tick.C
	}
}

func meanLate(a, b delayline.Stats) float64 {
	if n := b.Releases - a.Releases; n > 0 {
		return float64(b.LateSumNS-a.LateSumNS) / float64(n) / 1e3
	}
	return 0
}

// lineCPU is the CPU time (user+system, ns) the delay-line process has used so far:
// its cost per packet, which the machine's load does not change much.
func lineCPU(tb *testbed.Testbed) int64 {
	pid, _ := tb.DelayLinePid()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return (ut + st) * int64(time.Second) / clockTicks
}

// drops are kernel counters of packets lost outside the delay line: UDP receive-buffer
// overflows in the internet namespace (the sink did not read in time) and the per-CPU
// input backlog (net.core.netdev_max_backlog; machine-wide, all namespaces).
type drops struct{ rcvbuf, backlog uint64 }

func kernelDrops(tb *testbed.Testbed) drops {
	var d drops
	_ = netns.Do(tb.Inet(), func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		var names []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "Udp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i := 1; i < len(f) && i < len(names); i++ {
				if names[i] == "RcvbufErrors" {
					d.rcvbuf, _ = strconv.ParseUint(f[i], 10, 64)
				}
			}
		}
		return nil
	})
	if b, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				v, _ := strconv.ParseUint(f[1], 16, 64)
				d.backlog += v
			}
		}
	}
	return d
}

// machine is the "cpu" line of /proc/stat: where the machine's time went.
type machine struct{ busy, idle, steal uint64 }

func readMachine() machine {
	var m machine
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return m
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i := 1; i < len(f) && i <= 8; i++ {
		v, _ := strconv.ParseUint(f[i], 10, 64)
		switch i {
		case 4, 5: // idle, iowait
			m.idle += v
		case 8:
			m.steal += v
		default:
			m.busy += v
		}
	}
	return m
}

// since describes the machine's time since m: busy (everyone, this benchmark included),
// idle, and stolen by the hypervisor (a vCPU not running at all: nothing on it keeps time).
func (m machine) since() string {
	n := readMachine()
	busy, idle, steal := n.busy-m.busy, n.idle-m.idle, n.steal-m.steal
	tot := float64(max(busy+idle+steal, 1))
	return fmt.Sprintf("busy %.0f%%, idle %.0f%%, steal %.1f%%", 100*float64(busy)/tot, 100*float64(idle)/tot, 100*float64(steal)/tot)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

func wakeups(a, b delayline.Stats) float64 {
	if n := b.Received - a.Received; n > 0 {
		return float64(b.Wakeups-a.Wakeups) / float64(n)
	}
	return 0
}

func waitQuiet(s *udpSink) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := s.n.Load()
	for range tick.C {
		n := s.n.Load()
		if n == last {
			return
		}
		last = n
	}
}

func readStats(tb *testbed.Testbed) delayline.Stats {
	var st delayline.Stats
	// The stats file is rewritten every second; the counters are cumulative.
	b, err := os.ReadFile(filepath.Join(tb.State, "delayline.stats.json"))
	if err == nil {
		_ = json.Unmarshal(b, &st)
	}
	return st
}

// envDurationOrNone reads a duration from the environment (def when unset); an explicit
// 0 means none, which the delay line's options spell -1.
func envDurationOrNone(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	if d == 0 {
		return -1 // none
	}
	return d
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func absd(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }
