package testbed

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/testbed/delayline"
	"github.com/doqscan/doqscan/internal/testbed/proc"
)

// EnvChild marks a process the testbed started from its own executable to play a role
// (today: the delay line). A test binary or cmd/testnet that imports this package turns
// into that role before its main runs: the delay line must run from whatever binary
// called Ensure, and a test binary has no other entry point. (The reexec pattern of
// docker's pkg/reexec; the only init side effect of the package, and it only acts when
// the testbed itself set the variable.)
const EnvChild = "DOQSCAN_TESTBED_CHILD"

var sighup = syscall.SIGHUP

func init() {
	if os.Getenv(EnvChild) == delaylineName && len(os.Args) > 1 && os.Args[1] == delaylineName {
		os.Exit(DelayLineMain(os.Args[2:]))
	}
}

// DelayLineMain runs the delay-line process (`testnet delayline ...`) and returns its
// exit code. Run it inside the router namespace.
func DelayLineMain(args []string) int {
	fs := flag.NewFlagSet("testnet delayline", flag.ContinueOnError)
	tun := fs.String("tun", "tun0", "TUN device to attach to (in the current network namespace)")
	table := fs.String("table", "", "path table file (see docs/testbed.md); SIGHUP re-reads it")
	stats := fs.String("stats", "", "write JSON counters here every second")
	control := fs.String("control", "", "Unix socket for run-time path overrides (testnet path set/reset)")
	var seed uint64
	var lead, quantum time.Duration
	var queues int
	cli.Uint64Var(fs, &seed, "seed", 1, 0, math.MaxUint64, "seed of the loss/jitter RNG")
	cli.DurationVar(fs, &lead, "lead", 0, 0, time.Second, "release packets this much before their deadline (wake-up latency compensation)")
	rt := fs.Bool("realtime", true, "run the reader and release threads SCHED_FIFO (root)")
	qos := fs.Bool("hold-cpu-latency", true, "hold /dev/cpu_dma_latency at 0 while running (idle CPUs poll instead of halting; see docs/testbed.md)")
	cli.IntVar(fs, &queues, "queues", delayline.DefaultQueues, 1, 256, "TUN queues, one worker thread each (the kernel hashes flows onto them)")
	cli.DurationVar(fs, &quantum, "quantum", delayline.DefaultQuantum, -time.Second, time.Second, "a wake-up also releases packets due within this much after the first (fewer wake-ups under load; see docs/testbed.md); negative: none")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *table == "" {
		fmt.Fprintln(os.Stderr, "testnet delayline: --table is required")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "delayline")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := delayline.Serve(ctx, delayline.ServeConfig{
		TUN: *tun, TableFile: *table, StatsFile: *stats, ControlSocket: *control, Seed: seed, Lead: lead, RealTime: *rt, Queues: queues, Quantum: quantum, HoldCPULatency: *qos,
		Ready: proc.SignalReady, Log: log,
	})
	if err != nil {
		log.Error("delay line failed", "err", err)
		return 1
	}
	return 0
}
