package probe

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/doqscan/doqscan/internal/store"
)

// ScanLockKey is the advisory lock of a scan (store.RunKey): its week, vantage point,
// label and shard, the natural key of the scans row. zprobe scan, send and ingest take
// it, so one process at a time sends, or settles, a scan.
func ScanLockKey(week, vantage, label string, shard int) string {
	return store.RunKey("scan", week, vantage, label, strconv.Itoa(shard))
}

// holdScanLock takes the scan's lock for a run with a store (HoldLock: a second run of
// the scan gets a *store.LockedError, exit 75, before it writes or sends anything) and
// returns the run's context (cancelled if another run takes the lock while this one's
// connection is down) and the function that releases it and reports that loss. Without
// a store there is no lock.
func holdScanLock(ctx context.Context, s *store.Store, key string, log *slog.Logger) (context.Context, func() error, error) {
	if s == nil {
		return ctx, func() error { return nil }, nil
	}
	return s.HoldLock(ctx, key, store.RetryPolicy{}, log)
}
