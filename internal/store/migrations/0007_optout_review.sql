-- Opt-out requests under review: a request the page's policy does not honour at once is
-- 'pending' until an operator accepts or rejects it (optout accept|reject ID); an
-- accepted one can be withdrawn (optout withdraw ID). Only 'accepted' rows feed the
-- blocklist (blocklist.OptOuts, blocklist/optout.conf). Every change of status, and every
-- submission through the page, leaves one row in optout_audit. Written by
-- internal/optout only.

ALTER TABLE optout_requests DROP CONSTRAINT IF EXISTS optout_requests_status_check;
ALTER TABLE optout_requests ADD CONSTRAINT optout_requests_status_check
    CHECK (status IN ('pending', 'accepted', 'rejected', 'withdrawn'));
-- The column's default stays 'accepted' (an operator's hand-written INSERT, as before);
-- the page always sets the status its policy decided.
-- When the status last changed.
ALTER TABLE optout_requests ADD COLUMN IF NOT EXISTS updated_at timestamptz;
UPDATE optout_requests SET updated_at = created_at WHERE updated_at IS NULL;
ALTER TABLE optout_requests ALTER COLUMN updated_at SET DEFAULT now();
ALTER TABLE optout_requests ALTER COLUMN updated_at SET NOT NULL;
CREATE INDEX IF NOT EXISTS optout_status_idx ON optout_requests (status, request_id);

-- One row per submission through the page and per decision of an operator. Kept when a
-- request changes again; a request with audit rows cannot be deleted by accident (no
-- cascade): delete its audit rows first, deliberately.
CREATE TABLE IF NOT EXISTS optout_audit (
    audit_id       bigserial   PRIMARY KEY,
    request_id     bigint      NOT NULL REFERENCES optout_requests (request_id),
    action         text        NOT NULL CHECK (action IN ('submitted', 'accepted', 'rejected', 'withdrawn')),
    from_status    text        CHECK (from_status IN ('pending', 'accepted', 'rejected', 'withdrawn')),  -- NULL: new request
    to_status      text        NOT NULL CHECK (to_status IN ('pending', 'accepted', 'rejected', 'withdrawn')),
    actor          text        NOT NULL CHECK (length(actor) <= 200),   -- "web 192.0.2.7" or "cli alice@scanner1"
    reason         text        NOT NULL DEFAULT '' CHECK (length(reason) <= 2000),
    at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS optout_audit_request_idx ON optout_audit (request_id, audit_id);

-- Requests stored before review existed were honoured at once; their audit row says so.
INSERT INTO optout_audit (request_id, action, from_status, to_status, actor, reason, at)
SELECT r.request_id, 'submitted', NULL, r.status, 'migration 0004', 'stored before opt-out review existed', r.created_at
  FROM optout_requests r
 WHERE NOT EXISTS (SELECT 1 FROM optout_audit a WHERE a.request_id = r.request_id);
