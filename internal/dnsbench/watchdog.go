package dnsbench

import (
	"sync"
	"time"
)

// watchdog calls fire once, when the time last set passes, as time.AfterFunc does; but
// setting its time only stores it, where a timer's Reset moves the runtime's timer: a
// worker with one query outstanding sets it for each query, each later than the last.
// Its timer wakes at the time it was armed for and re-arms for the time set since (or,
// paused, a period later); only a time set before the timer's wake-up moves the timer.
type watchdog struct {
	mu      sync.Mutex
	due     time.Time // zero: paused
	wake    time.Time // when the timer wakes
	period  time.Duration
	stopped bool
	wakes   int // how often the timer woke (a test's count)
	t       *time.Timer
	fire    func()
}

func newWatchdog(due time.Time, period time.Duration, fire func()) *watchdog {
	w := &watchdog{due: due, wake: due, period: period, fire: fire}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t = time.AfterFunc(time.Until(due), w.check)
	return w
}

// arm wakes the timer at t (w.mu held).
func (w *watchdog) arm(t, now time.Time) {
	w.wake = t
	w.t.Reset(t.Sub(now))
}

func (w *watchdog) check() {
	w.mu.Lock()
	w.wakes++
	if w.stopped {
		w.mu.Unlock()
		return
	}
	if now := time.Now(); w.due.IsZero() || now.Before(w.due) {
		next := now.Add(w.period)
		if !w.due.IsZero() {
			next = w.due
		}
		w.arm(next, now)
		w.mu.Unlock()
		return
	}
	w.stopped = true
	w.mu.Unlock()
	w.fire()
}

// Set makes due the time at which fire runs.
func (w *watchdog) Set(due time.Time) {
	w.mu.Lock()
	w.due = due
	if !w.stopped && !due.IsZero() && due.Before(w.wake) {
		w.arm(due, time.Now())
	}
	w.mu.Unlock()
}

// Pause keeps fire from running until the next Set.
func (w *watchdog) Pause() { w.Set(time.Time{}) }

// Stop ends the watchdog; it reports whether fire had not run (and now never will).
func (w *watchdog) Stop() bool {
	w.mu.Lock()
	was := !w.stopped
	w.stopped = true
	w.mu.Unlock()
	w.t.Stop()
	return was
}
