package delayline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// minProcs is the GOMAXPROCS the delay-line process runs with at least (see Serve).
const minProcs = 8

// gcMemoryLimit is the heap size at which the delay line collects garbage after all (the
// slab of DefaultMaxInFlight packets is 128 MiB).
const gcMemoryLimit = 512 << 20

// ServeConfig configures the long-lived delay-line process (`testnet delayline`).
type ServeConfig struct {
	TUN       string // TUN device, e.g. "tun0"
	TableFile string // path table (ParseTable format); SIGHUP re-reads it
	StatsFile string // JSON Stats, rewritten every second and at exit ("" = none)
	// ControlSocket, if set, is the Unix socket of run-time path overrides (control.go).
	ControlSocket string
	Seed          uint64
	Lead          time.Duration
	Quantum       time.Duration // see Config.Quantum
	RealTime      bool          // see Config.RealTime
	// Queues is the number of TUN queues, one worker thread each (0: DefaultQueues).
	Queues int
	// HoldCPULatency asks the kernel for zero CPU wake-up latency (PM QoS,
	// /dev/cpu_dma_latency) while the line runs: see holdCPULatency.
	HoldCPULatency bool
	// Ready, if set, is called once the TUN device is attached and the table loaded.
	Ready func() error
	Log   *slog.Logger
}

// LoadTable reads a table file.
func LoadTable(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("path table: %w", err)
	}
	defer f.Close()
	t, err := ParseTable(f)
	if err != nil {
		return nil, fmt.Errorf("path table %s: %w", path, err)
	}
	return t, nil
}

// Serve runs the delay line on a TUN device until ctx is done. Run it inside the router
// namespace.
func Serve(ctx context.Context, cfg ServeConfig) error {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tbl, err := LoadTable(cfg.TableFile)
	if err != nil {
		return err
	}
	// The worker goroutines are locked to their threads; each time one
	// returns from a blocking syscall it needs a free P to run Go code. With GOMAXPROCS
	// at the CPU count (2 here) both Ps may be busy, and the thread then waits for the
	// scheduler (up to a 10 ms time slice): measured mean lateness 11 ms at 5k packets/s.
	// Spare Ps make that wait vanish; the threads still only use CPU when they work.
	if runtime.GOMAXPROCS(0) < minProcs {
		runtime.GOMAXPROCS(minProcs)
	}
	// No garbage collection in steady state: a stop-the-world pause is started and
	// ended by an ordinary-priority thread, which a loaded machine may not schedule for
	// hundreds of ms while the real-time threads wait (measured: releases up to 1.2 s
	// late). The hot path allocates nothing; the memory limit still collects if a slow
	// leak (stats encoding, reloads) ever adds up.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(gcMemoryLimit)
	if cfg.RealTime {
		if err := realtimeProcess(); err != nil {
			log.Warn("delay line: runtime threads not made SCHED_FIFO; the workers may stall under load", "err", err)
		}
	}
	if cfg.HoldCPULatency {
		if f, err := holdCPULatency(); err != nil {
			log.Warn("delay line: CPU wake-up latency not held at 0; idle wake-ups may be late by up to ~1 ms", "err", err)
		} else {
			defer f.Close()
		}
	}
	if cfg.Queues <= 0 {
		cfg.Queues = DefaultQueues
	}
	dev, err := OpenTUN(cfg.TUN, cfg.Queues)
	if err != nil && cfg.Queues > 1 {
		// A device created without multi_queue (an instance set up by an older testnet).
		log.Warn("delay line: multi-queue attach failed; running one queue (recreate the instance for more)", "err", err)
		cfg.Queues = 1
		dev, err = OpenTUN(cfg.TUN, 1)
	}
	if err != nil {
		return err
	}
	l, err := New(dev, Config{Paths: tbl, Vantage: tbl.Vantage, Seed: cfg.Seed, Lead: cfg.Lead, Quantum: cfg.Quantum, RealTime: cfg.RealTime, Log: log})
	if err != nil {
		dev.Close()
		return err
	}
	ctl := NewControl(tbl, func(t *Table) { l.SetPaths(t, t.Vantage) })
	if cfg.ControlSocket != "" {
		ln, err := ListenControl(cfg.ControlSocket)
		if err != nil {
			dev.Close()
			return err
		}
		defer os.Remove(cfg.ControlSocket)
		ctlCtx, stopCtl := context.WithCancel(ctx)
		defer stopCtl()
		go func() {
			if err := ctl.ServeControl(ctlCtx, ln); err != nil {
				log.Error("control socket failed", "err", err)
			}
		}()
	}
	log.Info("delay line running", "tun", cfg.TUN, "table", cfg.TableFile, "entries", tbl.Len(),
		"default_rtt", tbl.Default.RTT(), "seed", cfg.Seed, "realtime", cfg.RealTime, "queues", cfg.Queues, "lead", cfg.Lead, "quantum", l.cfg.Quantum, "pid", os.Getpid())
	if cfg.Ready != nil {
		if err := cfg.Ready(); err != nil {
			dev.Close()
			return fmt.Errorf("signalling readiness: %w", err)
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			writeStats(cfg.StatsFile, l.Stats())
			return err
		case <-ctx.Done():
			err := <-done
			st := l.Stats()
			writeStats(cfg.StatsFile, st)
			log.Info("delay line stopped", "stats", st)
			return err
		case <-hup:
			t, err := LoadTable(cfg.TableFile)
			if err != nil {
				log.Error("reload failed; keeping the old table", "err", err)
				continue
			}
			ctl.SetBase(t)
			log.Info("path table reloaded", "entries", t.Len(), "default_rtt", t.Default.RTT())
		case <-tick.C:
			writeStats(cfg.StatsFile, l.Stats())
		}
	}
}

func writeStats(path string, st Stats) {
	if path == "" {
		return
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if os.WriteFile(tmp, append(b, '\n'), 0o644) == nil {
		_ = os.Rename(tmp, path)
	}
}

// cpuLatencyQoS is the PM QoS device through which a process asks that no CPU enter an
// idle state with a longer exit latency than the value written (µs); the request holds
// while the file stays open (Documentation/power/pm_qos_interface.rst).
const cpuLatencyQoS = "/dev/cpu_dma_latency"

// holdCPULatency writes 0 to cpuLatencyQoS and returns the open file (closing it ends
// the request). Measured on the testbed machines (haltpoll cpuidle driver in a VM): with
// idle vCPUs halting, a timer or packet wake-up is late by 0.45 ms on average and up to
// ~2 ms, so ping through an idle 5 ms line read 7.1 ms; with the request held the idle
// loop polls instead of halting, wake-ups take tens of µs and the same ping read 5.1 ms.
// It costs no process CPU (the idle loop polls instead of halting; any runnable thread
// preempts it at once), only host cycles while the testbed is up; cyclictest does the same.
func holdCPULatency() (*os.File, error) {
	f, err := os.OpenFile(cpuLatencyQoS, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	var zero [4]byte // int32 0, native byte order
	if _, err := f.Write(zero[:]); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// runtimePriority is the SCHED_FIFO priority of the process's other threads (below the
// workers' rtPriority).
const runtimePriority = 1

// realtimeProcess puts every thread of the process under SCHED_FIFO at runtimePriority;
// threads created later inherit it from their creator. Why: Go preempts a goroutine that
// has run for 10 ms (sysmon), and a worker looks like one (it sleeps in raw ppoll). A
// preempted locked goroutine only resumes after another runtime thread has picked it off
// the run queue and handed it back; if that thread is an ordinary one on a loaded
// machine it may wait milliseconds for a CPU, and the worker with it.
func realtimeProcess() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: runtimePriority}, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}
