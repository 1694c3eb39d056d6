package store

import (
	"context"
)

// MigrateTo applies the schema up to version (tests of migrations build an older
// database with it).
func MigrateTo(ctx context.Context, s *Store, version int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return err
	}
	return applyMigrations(ctx, conn.Conn(), ms, applied, version)
}

// SetAfterMoveBatch sets the hook run after each batch of moveUnpartitioned.
func SetAfterMoveBatch(f func(table string, moved int64)) { afterMoveBatch = f }

// PartitionEnd is partitionEnd for tests.
var PartitionEnd = partitionEnd

// TakeAgainAfterLoss is what Keep does after the lock's connection dropped: take the
// lock on a new connection, ending the old one if the server still holds it for it.
func (l *Lock) TakeAgainAfterLoss(ctx context.Context) (oldPID, newPID uint32, err error) {
	l.mu.Lock()
	stale := l.pid
	l.mu.Unlock()
	err = l.take(ctx, stale)
	l.mu.Lock()
	defer l.mu.Unlock()
	return stale, l.pid, err
}
