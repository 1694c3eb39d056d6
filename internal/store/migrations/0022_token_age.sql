-- connection_policies: how long a DoQ server honours its NEW_TOKEN tokens. conncheck
-- presents a token of its own after each of its token ages (--token-ages: the wait from
-- the end of the connection that got the token to the connection that presents it);
-- honoured as token_honoured is (the token skipped a Retry or a stall a tokenless
-- connection met). NULL: no age was honoured (refused), or nothing could show it.
-- Added columns: existing rows keep NULL (not measured).
ALTER TABLE connection_policies
    ADD COLUMN IF NOT EXISTS token_honoured_for_ms  bigint CHECK (token_honoured_for_ms >= 0),  -- the longest token age honoured
    ADD COLUMN IF NOT EXISTS token_refused_after_ms bigint CHECK (token_refused_after_ms >= 0); -- the shortest token age refused
