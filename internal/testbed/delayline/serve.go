package delayline

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"
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
	Seed      uint64
	Lead      time.Duration
	RealTime  bool // see Config.RealTime
	Shards    int  // see Config.Shards
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
	// The reader and release goroutines are locked to their threads; each time one
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
	dev, err := OpenTUN(cfg.TUN)
	if err != nil {
		return err
	}
	l, err := New(dev, Config{Paths: tbl, Vantage: tbl.Vantage, Seed: cfg.Seed, Lead: cfg.Lead, RealTime: cfg.RealTime, Shards: cfg.Shards, Log: log})
	if err != nil {
		dev.Close()
		return err
	}
	log.Info("delay line running", "tun", cfg.TUN, "table", cfg.TableFile, "entries", tbl.Len(),
		"default_rtt", tbl.Default.RTT(), "seed", cfg.Seed, "realtime", cfg.RealTime, "shards", cfg.Shards, "pid", os.Getpid())
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
			l.SetPaths(t, t.Vantage)
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
