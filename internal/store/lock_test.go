package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestLockIsExclusiveAndNamesItsHolder: a key's lock is held once; the second taker
// gets a *LockedError naming the holder's process; another key is free; a released
// lock can be taken again.
func TestLockIsExclusiveAndNamesItsHolder(t *testing.T) {
	s, url := storetest.OpenURL(t)
	ctx := context.Background()
	other, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	key := store.RunKey("test", "vp1", "hourly", "2026-11-22T04")
	l, err := s.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.TryLock(ctx, key)
	var locked *store.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, store.ErrLocked) {
		t.Fatalf("second TryLock: %v, want a *LockedError", err)
	}
	t.Logf("second TryLock: %v", err)
	if !strings.Contains(locked.Holder, fmt.Sprintf("pid %d ", os.Getpid())) || locked.Since.IsZero() {
		t.Errorf("holder %q since %v: want this process's pid and a time", locked.Holder, locked.Since)
	}
	l2, err := other.TryLock(ctx, store.RunKey("test", "vp1", "hourly", "2026-11-22T05"))
	if err != nil {
		t.Fatalf("another key: %v", err)
	}
	l2.Release()
	l.Release()
	l3, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	l3.Release()
}

// TestLockHelperProcess is the child of TestLockOfAKilledProcessDoesNotBlock: it takes
// the lock of $DOQSCAN_LOCK_KEY, says "locked" and waits to be killed.
func TestLockHelperProcess(t *testing.T) {
	key := os.Getenv("DOQSCAN_LOCK_KEY")
	if key == "" {
		t.Skip("SKIP: the child process of TestLockOfAKilledProcessDoesNotBlock (runs only with DOQSCAN_LOCK_KEY)")
	}
	s, err := store.Open(context.Background(), os.Getenv("DOQSCAN_LOCK_URL"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryLock(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	select {} // until killed
}

// TestLockOfAKilledProcessDoesNotBlock: a process that holds a lock and is killed
// (SIGKILL: no cleanup) does not keep it: the next TryLock, right after the kill, gets
// it. The lock lives on the process's own connection, which dies with it.
func TestLockOfAKilledProcessDoesNotBlock(t *testing.T) {
	s, url := storetest.OpenURL(t)
	key := store.RunKey("test", "killed")
	child := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	child.Env = append(os.Environ(), "DOQSCAN_LOCK_KEY="+key, "DOQSCAN_LOCK_URL="+url)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child: %q %v", line, err)
	}
	ctx := context.Background()
	if _, err := s.TryLock(ctx, key); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("while the child holds it: %v, want ErrLocked", err)
	}
	child.Process.Kill()
	child.Wait()
	l, err := s.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("right after the holder was killed: %v", err)
	}
	l.Release()
}

// TestHoldLockStopsWhenAnotherRunTookIt: HoldLock keeps its lock; when the lock's
// connection is terminated while another session waits for the lock, that session gets
// it, HoldLock cannot take it back, and the run's context ends with a cause that says so
// (ErrLockLost, and ErrLocked: exit code 75). Whether the other session waits is read
// from pg_locks, not guessed.
func TestHoldLockStopsWhenAnotherRunTookIt(t *testing.T) {
	s, url := storetest.OpenURL(t)
	ctx := context.Background()
	other, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	key := store.RunKey("test", "taken")
	runCtx, release, err := s.HoldLock(ctx, key, store.RetryPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The other session waits until the holder is gone (the holder's own connection
	// keeps the default wait).
	defer func(d time.Duration) { store.LockWait = d }(store.LockWait)
	store.LockWait = time.Minute
	took := make(chan error, 1)
	var l2 *store.Lock
	go func() {
		var err error
		l2, err = other.TryLock(ctx, key)
		took <- err
	}()
	id := store.LockID(key)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for waiting := false; !waiting; <-poll.C {
		if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid::bigint = $1 AND objid::bigint = $2)`, int64(uint64(id)>>32), int64(uint64(id)&0xffffffff)).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := s.Pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid::bigint = $1 AND objid::bigint = $2`, int64(uint64(id)>>32), int64(uint64(id)&0xffffffff)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d lock holders (%v), want 1", n, err)
	}
	if err := <-took; err != nil {
		t.Fatalf("the waiting session: %v", err)
	}
	defer l2.Release()
	<-runCtx.Done()
	cause := context.Cause(runCtx)
	if !errors.Is(cause, store.ErrLockLost) || !errors.Is(cause, store.ErrLocked) {
		t.Errorf("run context ended with %v, want ErrLockLost and ErrLocked", cause)
	}
	if err := release(); !errors.Is(err, store.ErrLockLost) {
		t.Errorf("release: %v, want ErrLockLost", err)
	}
}

// TestHoldLockTakesItBackAfterARestart: when the lock's connection dies and nobody else
// wants the lock, HoldLock takes it back and the run goes on; the lock is then held
// again (another session cannot take it).
func TestHoldLockTakesItBackAfterARestart(t *testing.T) {
	s, url := storetest.OpenURL(t)
	ctx := context.Background()
	other, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	key := store.RunKey("test", "back")
	id := store.LockID(key)
	runCtx, release, err := s.HoldLock(ctx, key, store.RetryPolicy{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	holder := func() (pid int) {
		_ = s.Pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid::bigint = $1 AND objid::bigint = $2`, int64(uint64(id)>>32), int64(uint64(id)&0xffffffff)).Scan(&pid)
		return pid
	}
	first := holder()
	if _, err := s.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, first); err != nil {
		t.Fatal(err)
	}
	// Wait until a new session holds it (HoldLock took it back), bounded by the test's
	// own deadline.
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for p := holder(); p == 0 || p == first; p = holder() {
		if runCtx.Err() != nil {
			t.Fatalf("run stopped: %v", context.Cause(runCtx))
		}
		<-poll.C
	}
	if _, err := other.TryLock(ctx, key); !errors.Is(err, store.ErrLocked) {
		t.Errorf("after HoldLock took it back, another TryLock: %v, want ErrLocked", err)
	}
	if runCtx.Err() != nil {
		t.Errorf("run stopped: %v", context.Cause(runCtx))
	}
	if err := release(); err != nil {
		t.Errorf("release: %v", err)
	}
}
