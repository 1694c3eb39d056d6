package dnsbench

import (
	"testing"
	"testing/synctest"
	"time"
)

// The watchdog fires once, exactly when the time last set passes; paused it does not
// fire; a stopped one never fires, and Stop tells whether it had. A worker's pause and
// set per query wake its timer no more than once per period.
func TestWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWatchdog(time.Now().Add(time.Second), time.Second, func() { t.Error("fired while every query was answered in time") })
		for range 10000 { // 10,000 queries of 1 ms
			w.Pause()
			w.Set(time.Now().Add(time.Second))
			time.Sleep(time.Millisecond)
		}
		synctest.Wait()
		w.mu.Lock()
		wakes := w.wakes
		w.mu.Unlock()
		if max := 10; wakes > max {
			t.Errorf("timer woke %d times in 10 s of 1 ms queries, want at most %d (once per period)", wakes, max)
		}
		w.Stop()

		start := time.Now()
		var fired []time.Duration
		w = newWatchdog(start.Add(time.Second), time.Second, func() { fired = append(fired, time.Since(start)) })
		// Moved later twice before it was due: fires at the last time set.
		time.Sleep(900 * time.Millisecond)
		w.Set(start.Add(1500 * time.Millisecond))
		time.Sleep(500 * time.Millisecond)
		w.Set(start.Add(2200 * time.Millisecond))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if len(fired) != 1 || fired[0] != 2200*time.Millisecond {
			t.Fatalf("fired at %v, want once at 2.2s", fired)
		}
		if w.Stop() {
			t.Fatal("Stop after firing reported it had not fired")
		}

		fired = nil
		start = time.Now()
		w = newWatchdog(start.Add(time.Second), time.Second, func() { fired = append(fired, time.Since(start)) })
		w.Pause()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if len(fired) != 0 {
			t.Fatalf("paused watchdog fired at %v", fired)
		}
		w.Set(start.Add(10*time.Second + 300*time.Millisecond))
		time.Sleep(time.Second)
		synctest.Wait()
		if len(fired) != 1 || fired[0] != 10*time.Second+300*time.Millisecond {
			t.Fatalf("fired at %v, want once at 10.3s", fired)
		}

		fired = nil
		w = newWatchdog(time.Now().Add(time.Second), time.Second, func() { fired = append(fired, 0) })
		if !w.Stop() {
			t.Fatal("Stop before the due time reported that it had fired")
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if len(fired) != 0 {
			t.Fatal("stopped watchdog fired")
		}
	})
}
