package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrLocked says another session holds the advisory lock of the same key: another run
// of the same unit (a scan of a week and shard, a verification run, a measurement
// round, a scheduled job) is in progress. Commands exit with code 75 (cli.ExitLocked).
var ErrLocked = errors.New("another run holds the lock")

// ErrLockLost says the connection holding a lock dropped and the lock could not be
// taken back: PostgreSQL released it with the session, so another run could start.
var ErrLockLost = errors.New("the database connection holding the lock was lost")

// LockedError is ErrLocked with the key and, when PostgreSQL tells, who holds it.
type LockedError struct {
	Key    string
	Holder string    // the holding session's application_name ("doqscan measure pid 42 on vp1"), "" if unknown
	Since  time.Time // when the holding session connected (zero if unknown)
}

func (e *LockedError) Error() string {
	msg := fmt.Sprintf("%s: %v", e.Key, ErrLocked)
	if e.Holder != "" {
		msg += " (" + e.Holder
		if !e.Since.IsZero() {
			msg += ", connected " + e.Since.UTC().Format(time.RFC3339)
		}
		msg += ")"
	}
	return msg
}

func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// RunKey is the lock key of a run: its kind and its natural key, e.g.
// RunKey("measure", "vp1", "hourly", "2026-11-22T04").
func RunKey(kind string, parts ...string) string {
	return "doqscan-" + kind + "|" + strings.Join(parts, "|")
}

// LockID is the advisory lock id (a bigint) of key: its FNV-1a 64-bit hash.
func LockID(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int64(h.Sum64())
}

// Lock is a session-level advisory lock (pg_try_advisory_lock) on a connection of its
// own: not one of the pool's, which the pool may close or hand to other work, so the lock
// lives exactly as long as this process keeps the connection open. A process that dies
// closes it (the kernel closes the socket, the server ends the session), so the lock of a
// dead run never blocks the next one. The connection's application_name names the
// process ("doqscan <tool> pid <pid> on <host>"), which a LockedError reports.
type Lock struct {
	Key string
	id  int64
	cfg *pgx.ConnConfig

	mu   sync.Mutex
	conn *pgx.Conn
	pid  uint32 // the server process of the connection that took the lock last
}

// TryLock takes the lock of key, waiting at most LockWait for another session to let go
// of it. If another session still holds it, the error is a *LockedError (errors.Is
// ErrLocked); a database that cannot be reached gives an error wrapping ErrUnavailable.
func (s *Store) TryLock(ctx context.Context, key string) (*Lock, error) {
	cfg := s.Pool.Config().ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = processName()
	// How long the lock statement waits for a holder to let go: a run that died a moment
	// ago (its session is ending) does not make the next one fail.
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(LockWait.Milliseconds(), 10)
	// Over TCP, the server ends the session of a host that vanished (power loss, network
	// partition) after about idle + interval x count seconds of silence, which frees the
	// lock; the defaults would keep it for hours.
	cfg.RuntimeParams["tcp_keepalives_idle"] = "10"
	cfg.RuntimeParams["tcp_keepalives_interval"] = "5"
	cfg.RuntimeParams["tcp_keepalives_count"] = "3"
	l := &Lock{Key: key, id: LockID(key), cfg: cfg}
	if err := l.take(ctx, 0); err != nil {
		return nil, err
	}
	return l, nil
}

// processName is what the lock's connection calls this process.
func processName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("doqscan %s pid %d on %s", filepath.Base(os.Args[0]), os.Getpid(), host)
}

// take connects and takes the lock on the new connection, which it keeps. stale, if not
// 0, is the server process of this Lock's own earlier connection: a connection this
// process lost (a network cut) that the server has not noticed yet still holds the lock,
// and is ended instead of being taken for another run.
func (l *Lock) take(ctx context.Context, stale uint32) error {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return fmt.Errorf("lock %s: %w", l.Key, Unavailable(err))
	}
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", l.id)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: lock_timeout passed
		e := &LockedError{Key: l.Key}
		var holder uint32
		// An advisory lock on a bigint key is (classid, objid) = (high, low 32 bits),
		// objsubid 1.
		_ = conn.QueryRow(ctx, `SELECT k.pid, a.application_name, a.backend_start FROM pg_locks k
			JOIN pg_stat_activity a ON a.pid = k.pid
			WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
			  AND k.classid::bigint = $1 AND k.objid::bigint = $2 LIMIT 1`,
			int64(uint64(l.id)>>32), int64(uint64(l.id)&0xffffffff)).Scan(&holder, &e.Holder, &e.Since)
		if stale != 0 && holder == stale {
			// Our own lost session: end it (a role may end its own sessions) and wait
			// for the lock again.
			_, err = conn.Exec(ctx, "SELECT pg_terminate_backend($1)", int64(stale))
			if err == nil {
				_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", l.id)
			}
		}
		if err != nil {
			conn.Close(context.WithoutCancel(ctx))
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
				return e
			}
			return fmt.Errorf("lock %s: %w", l.Key, Unavailable(err))
		}
	}
	if err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("lock %s: %w", l.Key, Unavailable(err))
	}
	l.mu.Lock()
	l.conn = conn
	l.pid = conn.PgConn().PID()
	l.mu.Unlock()
	return nil
}

// Watch waits until ctx ends (nil) or the lock's connection fails (its error: the lock is
// gone). Waiting for a notification reads the socket, so a terminated backend or a
// closed connection ends the wait at once; every interval without news, a ping checks
// that a silent connection is still there.
func (l *Lock) Watch(ctx context.Context, interval time.Duration) error {
	l.mu.Lock()
	conn := l.conn
	l.mu.Unlock()
	if conn == nil {
		return fmt.Errorf("lock %s: %w", l.Key, ErrLockLost)
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, interval)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil || !pgconn.Timeout(err) {
			if err == nil {
				continue // a notification: nobody sends any, but it is harmless
			}
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, interval)
		err = conn.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Keep holds the lock until ctx ends (then it returns nil). When the lock's connection
// fails (the database restarted or went away), it connects again and takes the lock
// back, retrying with backoff (a warning per failure) for as long as the database is
// unavailable: how long a run may wait for its database is the run's own business. It
// returns an error wrapping ErrLockLost and the *LockedError when another run took the
// lock meanwhile: the run must stop.
func (l *Lock) Keep(ctx context.Context, interval time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for {
		err := l.Watch(ctx, interval)
		if err == nil {
			return nil
		}
		log.Warn("the database connection holding the run's lock dropped: taking the lock again", "key", l.Key, "err", oneLine(err))
		l.mu.Lock()
		stale := l.pid
		l.mu.Unlock()
		l.close(ctx)
		err = Retry(ctx, lockPolicy(RetryPolicy{Deadline: NoDeadline}), log, "take the run's lock again", func(actx context.Context) error {
			// Retry's attempt outlives ctx (for writes); this one need not.
			actx, cancel := context.WithCancel(actx)
			defer context.AfterFunc(ctx, cancel)()
			defer cancel()
			return l.take(actx, stale)
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrLockLost, err)
		}
		log.Warn("run's lock taken again", "key", l.Key)
	}
}

// lockPolicy is p with room in each attempt for the lock statement's wait (LockWait):
// an attempt cut short by its own timeout would look like an unavailable database.
func lockPolicy(p RetryPolicy) RetryPolicy {
	p.Attempt = max(p.Attempt, DefaultAttemptTimeout) + LockWait
	return p
}

// Release unlocks and closes the lock's connection (closing alone would release it too;
// unlocking first lets a waiting run see it free at once).
func (l *Lock) Release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	conn := l.conn
	l.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", l.id)
	}
	l.close(context.Background())
}

func (l *Lock) close(ctx context.Context) {
	l.mu.Lock()
	conn := l.conn
	l.conn = nil
	l.mu.Unlock()
	if conn != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}
}

// LockWait is how long TryLock waits for the lock's holder to let go before it says the
// lock is taken (ErrLocked).
var LockWait = time.Second

// DefaultLockCheck is how often a held lock's connection is pinged when nothing else
// says it dropped (a terminated backend or a closed connection is noticed at once).
const DefaultLockCheck = 10 * time.Second

// HoldLock takes the lock of key on a connection of its own (TryLock; the database
// unavailable is retried as p says) and keeps it (Keep, pinged every DefaultLockCheck)
// until release is called. If another session holds the lock, the error is a
// *LockedError and nothing is held. The returned context is ctx, cancelled with the
// loss as its cause (wrapping ErrLockLost) if another run took the lock while its
// connection was down; the run should then stop. release stops keeping the lock,
// releases it, and returns that loss (nil if none).
func (s *Store) HoldLock(ctx context.Context, key string, p RetryPolicy, log *slog.Logger) (context.Context, func() error, error) {
	var l *Lock
	err := Retry(ctx, lockPolicy(p), log, "take the run's lock", func(ctx context.Context) (err error) {
		l, err = s.TryLock(ctx, key)
		return err
	})
	if err != nil {
		return ctx, nil, err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	kept := make(chan error, 1)
	go func() {
		err := l.Keep(runCtx, DefaultLockCheck, log)
		if err != nil {
			if log != nil {
				log.Error("another run took this run's lock while its connection was down: stopping", "key", key, "err", err)
			}
			cancel(err)
		}
		kept <- err
	}()
	var once sync.Once
	var lost error
	release := func() error {
		once.Do(func() {
			cancel(nil)
			lost = <-kept
			l.Release()
		})
		return lost
	}
	return runCtx, release, nil
}
