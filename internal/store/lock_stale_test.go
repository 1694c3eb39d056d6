package store_test

import (
	"context"
	"testing"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// A lock whose connection this process lost (a network cut) while the server still holds
// the session is taken back on a new connection, ending the stale session, instead of
// being reported as taken by another run (which stopped a measure round after a cut).
func TestLockTakenBackFromItsOwnStaleSession(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	key := store.RunKey("test", "vp1", "hourly", "2026-11-22T04")
	l, err := s.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	// The old connection stays open and holding the lock, as a session the server has
	// not yet seen die.
	oldPID, newPID, err := l.TakeAgainAfterLoss(ctx)
	if err != nil {
		t.Fatalf("taking the lock back from its own stale session: %v", err)
	}
	if newPID == oldPID {
		t.Fatalf("the lock is on the same session %d", newPID)
	}
	var holders []uint32
	rows, err := s.Pool.Query(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND classid::bigint = $1 AND objid::bigint = $2`, int64(uint64(store.LockID(key))>>32), int64(uint64(store.LockID(key))&0xffffffff))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p uint32
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, p)
	}
	rows.Close()
	if len(holders) != 1 || holders[0] != newPID {
		t.Fatalf("lock held by %v, want the new session %d only", holders, newPID)
	}
}
