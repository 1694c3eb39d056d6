package campaign

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/doqscan/doqscan/internal/store"
)

// sink stores a round's batches from a goroutine of its own, so measuring never waits
// for the database. A batch that cannot be written because the database is
// unavailable stays queued while the write is retried (store.Retry: backoff, a warning
// per failure); batches measured meanwhile wait in memory up to maxMem resolvers, then
// in a spill file, which is written as soon as the queue is empty again. If the
// database stays away past the policy's deadline, or a write fails for another reason,
// the sink gives up: everything not stored goes to the spill file, and so does every
// later batch; onGiveUp is called once (the round stops measuring).
type sink struct {
	ctx      context.Context
	s        *store.Store
	log      *slog.Logger
	policy   store.RetryPolicy
	dir      string
	camp     spillCampaign
	maxMem   int
	onStored func(*batch) // from the sink's goroutine, after each batch is stored
	onGiveUp func(error)

	mu         sync.Mutex
	cond       *sync.Cond
	queue      []*batch // in memory; queue[0] is being written
	memTargets int
	spill      *spillWriter // overflow being appended, nil if none
	closed     bool
	err        error    // why the sink gave up
	leftFiles  []string // spill files left for a later round after giving up
	done       chan struct{}
}

func newSink(ctx context.Context, s *store.Store, cfg *Config, camp spillCampaign, log *slog.Logger,
	onStored func(*batch), onGiveUp func(error)) *sink {
	k := &sink{ctx: ctx, s: s, log: log, dir: cfg.SpillDir, camp: camp, maxMem: cfg.BufferResolvers,
		onStored: onStored, onGiveUp: onGiveUp, done: make(chan struct{})}
	k.cond = sync.NewCond(&k.mu)
	k.policy = store.RetryPolicy{Deadline: cfg.DBDeadline, Attrs: k.counts}
	go k.run()
	return k
}

// counts are the warning attributes: what waits to be stored.
func (k *sink) counts() []any {
	k.mu.Lock()
	defer k.mu.Unlock()
	spilled := 0
	if k.spill != nil {
		spilled = k.spill.resolvers
	}
	return []any{"buffered_resolvers", k.memTargets, "spilled_resolvers", spilled}
}

// pending returns the resolvers waiting in memory and in the open spill file.
func (k *sink) pending() (mem, spilled int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.spill != nil {
		spilled = k.spill.resolvers
	}
	return k.memTargets, spilled
}

// put hands a batch to the sink; it never waits for the database.
func (k *sink) put(b *batch) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil && (len(k.queue) == 0 || k.memTargets+b.targets <= k.maxMem) {
		k.enqueueLocked(b)
		return
	}
	if err := k.spillLocked(b); err != nil {
		// The disk refuses too: keep it in memory beyond the bound rather than lose it.
		k.log.Error("cannot spill results to disk: kept in memory", "err", err, "buffered_resolvers", k.memTargets+b.targets)
		k.enqueueLocked(b)
	}
}

func (k *sink) enqueueLocked(b *batch) {
	k.queue = append(k.queue, b)
	k.memTargets += b.targets
	k.cond.Signal()
}

func (k *sink) spillLocked(b *batch) error {
	if k.spill == nil {
		w, err := createSpill(k.dir, k.camp)
		if err != nil {
			return err
		}
		k.spill = w
		k.log.Warn("database writes are behind: results go to a spill file until they can be stored",
			"file", w.path, "buffered_resolvers", k.memTargets)
	}
	if err := k.spill.add(b); err != nil {
		return err
	}
	k.cond.Signal()
	return nil
}

func (k *sink) run() {
	defer close(k.done)
	for {
		k.mu.Lock()
		for len(k.queue) == 0 && k.spill == nil && !k.closed {
			k.cond.Wait()
		}
		switch {
		case len(k.queue) > 0:
			b := k.queue[0]
			k.mu.Unlock()
			err := store.Retry(k.ctx, k.policy, k.log, "write results", func(ctx context.Context) error {
				return write(ctx, k.s, b)
			})
			if err != nil {
				k.giveUp(err)
				return
			}
			k.mu.Lock()
			k.queue = k.queue[1:]
			k.memTargets -= b.targets
			k.mu.Unlock()
			k.onStored(b)
		case k.spill != nil:
			// The queue is empty: the database keeps up again; store what was spilled
			// (later batches go to memory, or to a new spill file).
			w := k.spill
			k.spill = nil
			k.mu.Unlock()
			if err := w.close(); err != nil {
				k.giveUp(err)
				return
			}
			n, err := replaySpillFile(k.ctx, k.s, w.path, k.policy, k.log, k.onStored)
			if err != nil {
				k.mu.Lock()
				k.leftFiles = append(k.leftFiles, w.path)
				k.mu.Unlock()
				k.giveUp(err)
				return
			}
			k.log.Warn("spilled results stored", "file", w.path, "resolvers", n)
		default: // closed, nothing left
			k.mu.Unlock()
			return
		}
	}
}

// giveUp moves what is queued to the spill file; later batches go there too.
func (k *sink) giveUp(err error) {
	k.mu.Lock()
	k.err = err
	for _, b := range k.queue {
		if serr := k.spillLocked(b); serr != nil {
			k.log.Error("cannot spill results to disk: they are lost", "resolvers", b.targets, "err", serr)
		}
	}
	k.queue, k.memTargets = nil, 0
	k.mu.Unlock()
	k.onGiveUp(err)
}

// close waits until every batch is stored, or spilled after giving up, and returns why
// it gave up (nil: everything is stored).
func (k *sink) close() error {
	k.mu.Lock()
	k.closed = true
	k.cond.Signal()
	k.mu.Unlock()
	<-k.done
	return k.err
}

// finish records the round's status: in the database (retried like a write), or, when
// the sink gave up or the database is unavailable past the deadline now, as the last
// record of the spill file, for the next round to write. It returns the status
// recorded, the resolvers left in spill files and the error that kept it from the
// database.
func (k *sink) finish(status store.RunStatus, summary func(spilled int) []byte) (store.RunStatus, int, error) {
	k.mu.Lock()
	gaveUp := k.err
	k.mu.Unlock()
	if gaveUp == nil {
		err := store.Retry(k.ctx, k.policy, k.log, "record the round's status", func(ctx context.Context) error {
			return k.s.FinishCampaign(ctx, k.camp.CampaignID, status, summary(0))
		})
		if err == nil {
			return status, 0, nil
		}
		if !errors.Is(err, store.ErrUnavailable) {
			return status, 0, fmt.Errorf("finish campaign: %w", err)
		}
		gaveUp = err
		status = store.RunStatusOf(k.ctx, err) // the database went away: interrupted
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	spilled := 0
	if k.spill != nil {
		spilled = k.spill.resolvers
	}
	for _, f := range k.leftFiles {
		k.log.Error("spill file kept for the next round", "file", f)
	}
	if k.spill == nil {
		w, err := createSpill(k.dir, k.camp)
		if err != nil {
			return status, spilled, errors.Join(gaveUp, err)
		}
		k.spill = w
	}
	js := summary(spilled)
	if err := k.spill.append(spillRecord{Finish: &spillFinish{Status: status, Summary: json.RawMessage(js)}}); err != nil {
		return status, spilled, errors.Join(gaveUp, err)
	}
	path := k.spill.path
	if err := k.spill.close(); err != nil {
		return status, spilled, errors.Join(gaveUp, err)
	}
	k.spill = nil
	k.log.Error("round ended without its database: results and status are in the spill file; the next round writes them",
		"file", path, "spilled_resolvers", spilled, "status", status)
	return status, spilled, gaveUp
}
