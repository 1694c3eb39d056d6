package optout

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doqscan/doqscan/internal/store"
)

// Entry is one row of optout_requests with its id and the reason of its latest audit row.
type Entry struct {
	ID         int64        `db:"request_id" json:"id"`
	Prefix     netip.Prefix `db:"prefix" json:"prefix"`
	Email      string       `db:"email" json:"email"`
	Note       string       `db:"note" json:"note,omitempty"`
	SourceAddr *netip.Addr  `db:"source_addr" json:"source_addr,omitempty"`
	Status     string       `db:"status" json:"status"`
	CreatedAt  time.Time    `db:"created_at" json:"created_at"`
	UpdatedAt  time.Time    `db:"updated_at" json:"updated_at"`
	Reason     string       `db:"reason" json:"reason,omitempty"`
}

// AuditRow is one row of optout_audit.
type AuditRow struct {
	ID         int64     `db:"audit_id" json:"audit_id"`
	RequestID  int64     `db:"request_id" json:"request_id"`
	Action     string    `db:"action" json:"action"`
	FromStatus *string   `db:"from_status" json:"from_status,omitempty"`
	ToStatus   string    `db:"to_status" json:"to_status"`
	Actor      string    `db:"actor" json:"actor"`
	Reason     string    `db:"reason" json:"reason,omitempty"`
	At         time.Time `db:"at" json:"at"`
}

// Actions an operator takes on a request (optout accept|reject|withdraw), as in
// optout_audit.action; "submitted" is the page's.
const (
	ActionSubmitted = "submitted"
	ActionAccept    = "accepted"
	ActionReject    = "rejected"
	ActionWithdraw  = "withdrawn"
)

// transitions: for each operator action, the status it sets and the statuses it may
// start from. Accepting a rejected or withdrawn request reinstates it; withdrawing a
// pending one cancels it before review.
var transitions = map[string]struct {
	to   string
	from []string
}{
	ActionAccept:   {StatusAccepted, []string{StatusPending, StatusRejected, StatusWithdrawn}},
	ActionReject:   {StatusRejected, []string{StatusPending}},
	ActionWithdraw: {StatusWithdrawn, []string{StatusAccepted, StatusPending}},
}

// ErrNoSuchRequest: no opt-out request has the given id.
var ErrNoSuchRequest = errors.New("no opt-out request with that id")

// TransitionError: the request's status does not allow the action (e.g. rejecting an
// accepted request: withdraw it instead).
type TransitionError struct {
	ID     int64
	Action string
	Status string
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("opt-out request %d is %s: it cannot be %s (allowed from: %v)", e.ID, e.Status, e.Action,
		transitions[e.Action].from)
}

const entryColumns = `r.request_id, r.prefix, r.email, r.note, r.source_addr, r.status, r.created_at, r.updated_at,
	coalesce((SELECT a.reason FROM optout_audit a WHERE a.request_id = r.request_id ORDER BY a.audit_id DESC LIMIT 1), '') AS reason`

// List returns the requests with the given status ("": all), oldest first.
func List(ctx context.Context, s *store.Store, status string) ([]Entry, error) {
	q := `SELECT ` + entryColumns + ` FROM optout_requests r WHERE $1 = '' OR r.status = $1 ORDER BY r.request_id`
	out, err := store.Select[Entry](ctx, s, q, status)
	if err != nil {
		return nil, fmt.Errorf("list opt-outs: %w", err)
	}
	return out, nil
}

// Get returns one request.
func Get(ctx context.Context, s *store.Store, id int64) (Entry, error) {
	out, err := store.Select[Entry](ctx, s, `SELECT `+entryColumns+` FROM optout_requests r WHERE r.request_id = $1`, id)
	if err != nil {
		return Entry{}, fmt.Errorf("read opt-out %d: %w", id, err)
	}
	if len(out) == 0 {
		return Entry{}, fmt.Errorf("%w: %d", ErrNoSuchRequest, id)
	}
	return out[0], nil
}

// Audit returns the audit rows of a request (0: of every request), oldest first.
func Audit(ctx context.Context, s *store.Store, id int64) ([]AuditRow, error) {
	out, err := store.Select[AuditRow](ctx, s, `SELECT audit_id, request_id, action, from_status, to_status, actor, reason, at
		FROM optout_audit WHERE $1 = 0 OR request_id = $1 ORDER BY audit_id`, id)
	if err != nil {
		return nil, fmt.Errorf("read opt-out audit: %w", err)
	}
	return out, nil
}

// Submit stores a request from the page with the status d gives it, and one audit row
// for the submission. The same prefix and email again is the same request: a new row is
// not added; a pending, rejected or withdrawn request that the policy now honours at once
// becomes accepted, a withdrawn one becomes pending again under review, and anything else
// stays as it is (a rejected request is not re-queued by resubmitting it). It returns the
// request as stored afterwards.
func Submit(ctx context.Context, s *store.Store, req Request, source *netip.Addr, d Decision, actor string, now time.Time) (Entry, error) {
	var id int64
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var status string
		err := tx.QueryRow(ctx, `INSERT INTO optout_requests (prefix, email, note, source_addr, status, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (prefix, email) DO NOTHING RETURNING request_id`,
			req.Prefix, req.Email, req.Note, source, d.Status, now).Scan(&id)
		var from *string
		to := d.Status
		switch {
		case err == nil: // a new request
		case errors.Is(err, pgx.ErrNoRows):
			if err := tx.QueryRow(ctx, `SELECT request_id, status FROM optout_requests WHERE prefix = $1 AND email = $2 FOR UPDATE`,
				req.Prefix, req.Email).Scan(&id, &status); err != nil {
				return err
			}
			from = &status
			switch {
			case d.Status == StatusAccepted && status != StatusAccepted:
			case d.Status == StatusPending && status == StatusWithdrawn:
			default:
				to = status
			}
			if to != status {
				if _, err := tx.Exec(ctx, `UPDATE optout_requests SET status = $2, updated_at = $3 WHERE request_id = $1`, id, to, now); err != nil {
					return err
				}
			}
		default:
			return err
		}
		reason := d.Reason
		if from != nil {
			reason = fmt.Sprintf("submitted again (was %s): %s", *from, reason)
			if to == *from {
				reason = fmt.Sprintf("submitted again, stays %s: %s", to, d.Reason)
			}
		}
		return insertAudit(ctx, tx, id, ActionSubmitted, from, to, actor, reason, now)
	})
	if err != nil {
		return Entry{}, fmt.Errorf("store opt-out %s: %w", req.Prefix, err)
	}
	return Get(ctx, s, id)
}

// Decide applies an operator's action (ActionAccept, ActionReject, ActionWithdraw) to
// request id, with one audit row. The request as it is afterwards is returned; an action
// its status does not allow is a *TransitionError and changes nothing.
func Decide(ctx context.Context, s *store.Store, id int64, action, actor, reason string, now time.Time) (Entry, error) {
	tr, ok := transitions[action]
	if !ok {
		return Entry{}, fmt.Errorf("unknown opt-out action %q", action)
	}
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM optout_requests WHERE request_id = $1 FOR UPDATE`, id).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %d", ErrNoSuchRequest, id)
		}
		if err != nil {
			return err
		}
		if !slices.Contains(tr.from, status) {
			return &TransitionError{ID: id, Action: action, Status: status}
		}
		if _, err := tx.Exec(ctx, `UPDATE optout_requests SET status = $2, updated_at = $3 WHERE request_id = $1`, id, tr.to, now); err != nil {
			return err
		}
		return insertAudit(ctx, tx, id, action, &status, tr.to, actor, reason, now)
	})
	if err != nil {
		return Entry{}, err
	}
	return Get(ctx, s, id)
}

func insertAudit(ctx context.Context, tx pgx.Tx, id int64, action string, from *string, to, actor, reason string, now time.Time) error {
	_, err := tx.Exec(ctx, `INSERT INTO optout_audit (request_id, action, from_status, to_status, actor, reason, at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, id, action, from, to, trunc(actor, 200), trunc(reason, MaxNoteLen), now)
	return err
}
