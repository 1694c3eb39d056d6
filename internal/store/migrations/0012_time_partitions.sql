-- Time partitions for the high-volume tables (docs/fleet.md).
--
-- measurements, qlogs, rtt_samples, handshake_analyses and bench_samples become
-- PostgreSQL declarative partitions by calendar month (UTC); scan_replies by ISO week.
-- The partition key is a function of each row's natural key, never of when the row was
-- written, so a re-run's rows land in the partition of the first run's and the natural
-- keys (and the UUIDv5 ids) keep deduplicating:
--
--   * measurements, qlogs, rtt_samples, handshake_analyses gain round_hour, the hour of
--     their campaign (campaigns.round_hour);
--   * scan_replies gains iso_week, the week of its scan (scans.iso_week);
--   * bench_samples gains started_at, the start of its run (bench_runs.started_at).
--
-- Every primary key gains the partition key (PostgreSQL requires it); since the key is
-- determined by the parent row, which the statement-level parent check verifies per
-- batch (doqscan_check_parent: the parent must exist AND carry the same key), the old
-- keys stay unique. handshake_analyses' per-row FOREIGN KEY to measurements becomes a
-- statement-level check like the others.
--
-- Partitions are named <table>_pYYYY_MM (months) and scan_replies_pYYYY_wWW (weeks), and
-- created by doqscan_ensure_month / doqscan_ensure_week: when a campaign, scan or bench
-- run is inserted (a trigger on the parent, so every writer gets them before its first
-- child row), and ahead of time by every tool at start (doqscan_ensure_ahead: this and
-- the next month, this and the next week). These functions
-- run with their owner's rights (SECURITY DEFINER), so a vantage role that may not alter
-- the schema still gets its month's partitions; they create nothing else. A partition
-- that retention has detached or dropped (partition_archive) is never created again:
-- rows for it are refused, not silently stored in a new, partial partition.
--
-- An existing database's tables are renamed <table>_unpartitioned here (an empty one is
-- dropped at once); internal/store moves their rows into the partitioned tables in
-- batches, with progress, resumable after a kill (internal/store/partition.go, run by
-- Migrate), and drops each when it is empty.

-- Retention's record of every partition it touched (dbctl retention; dbctl status).
CREATE TABLE IF NOT EXISTS partition_archive (
    partition     text PRIMARY KEY,                 -- e.g. measurements_p2026_01
    parent        text        NOT NULL,
    bounds        text        NOT NULL,             -- pg_get_expr of the partition bound
    state         text        NOT NULL CHECK (state IN ('detached', 'exported', 'verified', 'dropped', 'sampled')),
    rows          bigint,                           -- rows at detach time
    bytes         bigint,                           -- size at detach time
    checksum      text,                             -- order-independent checksum of the rows
    export_path   text        NOT NULL DEFAULT '',  -- the pg_dump file
    export_bytes  bigint,
    detail        text        NOT NULL DEFAULT '',
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- doqscan_attach_partition creates partition name of parent for bounds (a FOR VALUES
-- clause) unless it exists. Create-then-attach takes only a SHARE UPDATE EXCLUSIVE lock
-- on the parent, so writers loading other partitions are not blocked.
CREATE OR REPLACE FUNCTION doqscan_attach_partition(parent text, name text, bounds text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    st text;
BEGIN
    IF parent NOT IN ('measurements', 'qlogs', 'rtt_samples', 'handshake_analyses', 'bench_samples', 'scan_replies') THEN
        RAISE EXCEPTION 'doqscan_attach_partition: % is not a partitioned doqscan table', parent;
    END IF;
    SELECT a.state INTO st FROM partition_archive a WHERE a.partition = name;
    IF st IS NOT NULL THEN
        RAISE EXCEPTION 'partition % is archived (state %): its rows are no longer taken', name, st
            USING ERRCODE = 'check_violation',
                  HINT = 'retention detached it; see dbctl status and docs/fleet.md';
    END IF;
    IF to_regclass(name) IS NOT NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('doqscan partition'), hashtext(name));
    IF to_regclass(name) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)', name, parent);
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I %s', parent, name, bounds);
END $$;

-- The month tables' partitions for the month (UTC) holding at.
CREATE OR REPLACE FUNCTION doqscan_ensure_month(at timestamptz,
    tables text[] DEFAULT ARRAY['qlogs', 'measurements', 'rtt_samples', 'handshake_analyses', 'bench_samples'])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    m timestamptz;
    t text;
BEGIN
    IF at IS NULL OR at < '1990-01-01 00:00+00' OR at >= '2200-01-01 00:00+00' THEN
        RAISE EXCEPTION 'no partition for time %: want 1990 to 2199', at USING ERRCODE = 'check_violation';
    END IF;
    m := date_trunc('month', at, 'UTC');
    FOREACH t IN ARRAY tables LOOP
        PERFORM doqscan_attach_partition(t, t || to_char(m AT TIME ZONE 'UTC', '"_p"YYYY"_"MM'),
            format('FOR VALUES FROM (%L) TO (%L)', m, m + interval '1 month'));
    END LOOP;
END $$;

-- scan_replies' partition for an ISO week (YYYY-Www).
CREATE OR REPLACE FUNCTION doqscan_ensure_week(week text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF week IS NULL OR week !~ '^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$' THEN
        RAISE EXCEPTION 'no partition for ISO week %', week USING ERRCODE = 'check_violation';
    END IF;
    PERFORM doqscan_attach_partition('scan_replies', 'scan_replies_p' || lower(replace(week, '-', '_')),
        format('FOR VALUES IN (%L)', week));
END $$;

-- Partitions ahead of time: this and the next month, this and the next ISO week (every
-- tool calls it at start, and each partition costs tens of milliseconds to create; the
-- parents' triggers make any other month's or week's on demand).
CREATE OR REPLACE FUNCTION doqscan_ensure_ahead()
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    i int;
BEGIN
    FOR i IN 0..1 LOOP
        PERFORM doqscan_ensure_month(now() + make_interval(months => i));
    END LOOP;
    FOR i IN 0..1 LOOP
        PERFORM doqscan_ensure_week(to_char((now() AT TIME ZONE 'UTC') + make_interval(weeks => i), 'IYYY-"W"IW'));
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION doqscan_parent_partitions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'scans' THEN
        PERFORM doqscan_ensure_week(NEW.iso_week);
    ELSIF TG_TABLE_NAME = 'campaigns' THEN
        PERFORM doqscan_ensure_month(NEW.round_hour,
            ARRAY['qlogs', 'measurements', 'rtt_samples', 'handshake_analyses']);
    ELSE
        PERFORM doqscan_ensure_month(NEW.started_at, ARRAY['bench_samples']);
    END IF;
    RETURN NULL;
END $$;

-- ---------------------------------------------------------------------------------------
-- Set the existing tables aside (renamed, with their indexes, triggers and foreign keys
-- out of the way); drop those that are empty.
DO $$
DECLARE
    t text;
    r record;
BEGIN
    FOREACH t IN ARRAY ARRAY['handshake_analyses', 'measurements', 'qlogs', 'rtt_samples', 'scan_replies', 'bench_samples'] LOOP
        IF (SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(t)) IS DISTINCT FROM 'r' THEN
            CONTINUE;
        END IF;
        -- Foreign keys would act on the move; CHECKs would take their names from the new
        -- tables' (constraint names are chosen unique in the schema).
        FOR r IN SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(t) AND contype IN ('f', 'c') LOOP
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t, r.conname);
        END LOOP;
        FOR r IN SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(t) AND NOT tgisinternal LOOP
            EXECUTE format('DROP TRIGGER %I ON %I', r.tgname, t);
        END LOOP;
        FOR r IN SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = to_regclass(t) LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', r.relname, left(r.relname, 48) || '_unpartitioned');
        END LOOP;
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t, t || '_unpartitioned');
    END LOOP;
END $$;

DO $$
DECLARE
    t text;
    empty boolean;
BEGIN
    FOREACH t IN ARRAY ARRAY['handshake_analyses', 'measurements', 'qlogs', 'rtt_samples', 'scan_replies', 'bench_samples'] LOOP
        IF to_regclass(t || '_unpartitioned') IS NOT NULL THEN
            EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %I)', t || '_unpartitioned') INTO empty;
            IF empty THEN
                EXECUTE format('DROP TABLE %I', t || '_unpartitioned');
            END IF;
        END IF;
    END LOOP;
END $$;

-- ---------------------------------------------------------------------------------------
-- The partitioned tables: the columns, CHECKs and indexes of schema.sql and migrations
-- 0005, 0006 and 0010, plus the partition key (last column).

CREATE TABLE IF NOT EXISTS qlogs (
    qlog_id        uuid        NOT NULL,
    campaign_id    bigint      NOT NULL,                  -- -> campaigns: set-based check
    address        inet        NOT NULL,
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    odcid          bytea,
    encoding       text        NOT NULL CHECK (encoding IN ('gzip', 'zstd', 'identity')),
    format         text        NOT NULL DEFAULT 'sqlog' CHECK (format IN ('sqlog', 'qlog', 'qlog-ndjson')),
    raw_size       integer     NOT NULL,
    data           bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    truncated      boolean     NOT NULL DEFAULT false,
    round_hour     timestamptz NOT NULL,                  -- = campaigns.round_hour
    PRIMARY KEY (qlog_id, round_hour)
) PARTITION BY RANGE (round_hour);
CREATE INDEX IF NOT EXISTS qlogs_campaign_idx ON qlogs (campaign_id);

CREATE TABLE IF NOT EXISTS measurements (
    measurement_id uuid        NOT NULL,                  -- UUIDv5 of the natural key
    campaign_id    bigint      NOT NULL,                  -- -> campaigns: set-based check
    address        inet        NOT NULL,
    protocol       text        NOT NULL CHECK (protocol IN ('doudp', 'dotcp', 'dot', 'doh', 'doq', 'doh3')),
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    variant        text        NOT NULL DEFAULT '',
    mode           text        NOT NULL DEFAULT 'fresh'
                               CHECK (mode IN ('fresh', 'resumed', '0rtt', 'persistent')),
    key_share      text        NOT NULL DEFAULT '',
    phase          text        NOT NULL CHECK (phase IN ('warmup', 'measured')),
    seq            smallint    NOT NULL DEFAULT 0,
    started_at     timestamptz NOT NULL,
    handshake_ns   bigint,
    resolve_ns     bigint,
    status         text        NOT NULL CHECK (status IN ('ok', 'timeout', 'conn-refused', 'reset', 'tls-error',
                       'quic-error', 'alpn-mismatch', 'http-error', 'bad-response', 'network-error', 'error')),
    error          text        NOT NULL DEFAULT '',
    rcode          smallint,
    answers        text[],
    tls_version    integer,
    tls_cipher     text,
    quic_version   bigint,
    alpn           text,
    token_received boolean,
    token_used     boolean,
    retry_seen     boolean,
    vn_seen        boolean,
    resumed        boolean,
    used_0rtt      boolean,
    tfo            boolean,
    qlog_id        uuid,                                  -- -> qlogs (same round_hour): set-based check
    round_hour     timestamptz NOT NULL,                  -- = campaigns.round_hour
    PRIMARY KEY (measurement_id, round_hour)
) PARTITION BY RANGE (round_hour);
CREATE INDEX IF NOT EXISTS measurements_campaign_proto_idx ON measurements (campaign_id, protocol, phase);

CREATE TABLE IF NOT EXISTS rtt_samples (
    campaign_id    bigint      NOT NULL,                  -- -> campaigns: set-based check
    address        inet        NOT NULL,
    transport      text        NOT NULL CHECK (transport IN ('udp', 'tcp', 'quic', 'icmp')),
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    seq            smallint    NOT NULL,
    sent_at        timestamptz NOT NULL,
    rtt_ns         bigint,
    status         text        NOT NULL CHECK (status IN ('ok', 'timeout', 'conn-refused', 'error')),
    detail         text        NOT NULL DEFAULT '',
    round_hour     timestamptz NOT NULL,                  -- = campaigns.round_hour
    PRIMARY KEY (campaign_id, address, transport, port, seq, round_hour)
) PARTITION BY RANGE (round_hour);

CREATE TABLE IF NOT EXISTS handshake_analyses (
    measurement_id        uuid    NOT NULL,               -- -> measurements (same round_hour): set-based check
    rtt_ns                bigint,
    ratio                 real,
    round_trips           smallint,
    one_rtt               boolean NOT NULL DEFAULT false,
    version_negotiation   boolean NOT NULL DEFAULT false,
    retry                 boolean NOT NULL DEFAULT false,
    amplification_stall   boolean NOT NULL DEFAULT false,
    loss                  boolean NOT NULL DEFAULT false,
    client_initial_bytes  integer,
    server_bytes_pre_ack  integer,
    stall_ns              bigint,
    cause                 text    NOT NULL CHECK (cause IN ('1rtt', 'retry', 'version-negotiation',
                                     'amplification', 'loss', 'multiple', 'unknown')),
    detail                jsonb,
    round_hour            timestamptz NOT NULL,           -- = the measurement's round_hour
    PRIMARY KEY (measurement_id, round_hour)
) PARTITION BY RANGE (round_hour);

CREATE TABLE IF NOT EXISTS scan_replies (
    scan_id        bigint      NOT NULL,                  -- -> scans: set-based check
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    address        inet        NOT NULL,
    sport          integer,
    reply_kind     text        NOT NULL CHECK (reply_kind IN ('quic-vn', 'quic-vn-invalid', 'quic-other',
                       'not-quic', 'dns', 'dns-malformed', 'icmp-unreach', 'udp-reply')),
    quic_versions  bigint[],
    grease_count   smallint,
    vn_cid_match   boolean,
    dns_rcode      smallint,
    dns_answers    smallint,
    dns_ra         boolean,
    icmp_type      smallint,
    icmp_code      smallint,
    payload_len    integer,
    payload        bytea,
    received_at    timestamptz NOT NULL,
    iso_week       text        NOT NULL,                  -- = scans.iso_week
    PRIMARY KEY (scan_id, port, address, iso_week)
) PARTITION BY LIST (iso_week);
CREATE INDEX IF NOT EXISTS scan_replies_kind_idx ON scan_replies (scan_id, reply_kind);
CREATE INDEX IF NOT EXISTS scan_replies_addr_idx ON scan_replies (address);
-- Migration 0006 widened these CHECKs NOT VALID on the old tables; applied again (over
-- a database that has this one), it would leave them NOT VALID here: the same list,
-- validated (a no-op when it is valid already).
ALTER TABLE qlogs VALIDATE CONSTRAINT qlogs_format_check;
ALTER TABLE scan_replies VALIDATE CONSTRAINT scan_replies_reply_kind_check;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'bench_runs_id_started_key'
                    AND conrelid = 'bench_runs'::regclass) THEN
        ALTER TABLE bench_runs ADD CONSTRAINT bench_runs_id_started_key UNIQUE (bench_id, started_at);
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS bench_samples (
    bench_id   bigint  NOT NULL,
    second     integer NOT NULL CHECK (second >= 0),
    rate       double precision,
    sent       bigint  NOT NULL,
    answered   bigint  NOT NULL,
    failed     bigint  NOT NULL,
    mean_ms    double precision,
    p99_ms     double precision,
    started_at timestamptz NOT NULL,                      -- = bench_runs.started_at
    PRIMARY KEY (bench_id, second, started_at),
    FOREIGN KEY (bench_id, started_at) REFERENCES bench_runs (bench_id, started_at) ON DELETE CASCADE
) PARTITION BY RANGE (started_at);

-- ---------------------------------------------------------------------------------------
-- Set-based parent checks: the parent must exist and carry the row's partition key.
CREATE OR REPLACE FUNCTION doqscan_check_parent() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    IF TG_TABLE_NAME = 'scan_replies' THEN
        SELECT n.scan_id::text || ' week ' || n.iso_week INTO missing FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM scans p WHERE p.scan_id = n.scan_id AND p.iso_week = n.iso_week) LIMIT 1;
    ELSIF TG_TABLE_NAME = 'handshake_analyses' THEN
        SELECT 'measurement ' || n.measurement_id::text INTO missing FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM measurements m
                            WHERE m.measurement_id = n.measurement_id AND m.round_hour = n.round_hour) LIMIT 1;
    ELSE
        SELECT n.campaign_id::text || ' hour ' || n.round_hour::text INTO missing FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM campaigns p
                            WHERE p.campaign_id = n.campaign_id AND p.round_hour = n.round_hour) LIMIT 1;
        IF missing IS NULL AND TG_TABLE_NAME = 'measurements' THEN
            SELECT 'qlog ' || n.qlog_id::text INTO missing FROM new_rows n
             WHERE n.qlog_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM qlogs q
                            WHERE q.qlog_id = n.qlog_id AND q.round_hour = n.round_hour) LIMIT 1;
        END IF;
    END IF;
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'insert into % references a missing parent (%)', TG_TABLE_NAME, missing
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER scan_replies_parent AFTER INSERT ON scan_replies
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_check_parent();
CREATE OR REPLACE TRIGGER measurements_parent AFTER INSERT ON measurements
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_check_parent();
CREATE OR REPLACE TRIGGER rtt_samples_parent AFTER INSERT ON rtt_samples
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_check_parent();
CREATE OR REPLACE TRIGGER qlogs_parent AFTER INSERT ON qlogs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_check_parent();
CREATE OR REPLACE TRIGGER handshake_analyses_parent AFTER INSERT ON handshake_analyses
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_check_parent();

-- Deleting a scan, a campaign, a measurement or a qlog (by hand: no tool does) deletes or
-- unlinks what hangs off it, as ON DELETE CASCADE / SET NULL would.
CREATE OR REPLACE FUNCTION doqscan_cascade_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'scans' THEN
        DELETE FROM scan_replies r USING old_rows o WHERE r.scan_id = o.scan_id AND r.iso_week = o.iso_week;
    ELSIF TG_TABLE_NAME = 'campaigns' THEN
        DELETE FROM measurements m USING old_rows o WHERE m.campaign_id = o.campaign_id AND m.round_hour = o.round_hour;
        DELETE FROM rtt_samples r USING old_rows o WHERE r.campaign_id = o.campaign_id AND r.round_hour = o.round_hour;
        DELETE FROM qlogs q USING old_rows o WHERE q.campaign_id = o.campaign_id AND q.round_hour = o.round_hour;
    ELSIF TG_TABLE_NAME = 'measurements' THEN
        DELETE FROM handshake_analyses a USING old_rows o
         WHERE a.measurement_id = o.measurement_id AND a.round_hour = o.round_hour;
    ELSIF TG_TABLE_NAME = 'qlogs' THEN
        UPDATE measurements m SET qlog_id = NULL FROM old_rows o
         WHERE m.qlog_id = o.qlog_id AND m.round_hour = o.round_hour;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER measurements_cascade AFTER DELETE ON measurements
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_cascade_delete();
CREATE OR REPLACE TRIGGER qlogs_cascade AFTER DELETE ON qlogs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_cascade_delete();

CREATE OR REPLACE TRIGGER campaigns_partitions AFTER INSERT ON campaigns
    FOR EACH ROW EXECUTE FUNCTION doqscan_parent_partitions();
CREATE OR REPLACE TRIGGER scans_partitions AFTER INSERT ON scans
    FOR EACH ROW EXECUTE FUNCTION doqscan_parent_partitions();
CREATE OR REPLACE TRIGGER bench_runs_partitions AFTER INSERT ON bench_runs
    FOR EACH ROW EXECUTE FUNCTION doqscan_parent_partitions();

-- Partitions for every month and week that already has a parent row (the moved rows
-- need them), and ahead of time.
SELECT doqscan_ensure_month(m, ARRAY['qlogs', 'measurements', 'rtt_samples', 'handshake_analyses'])
  FROM (SELECT DISTINCT date_trunc('month', round_hour, 'UTC') AS m FROM campaigns) c;
SELECT doqscan_ensure_week(w) FROM (SELECT DISTINCT iso_week AS w FROM scans) s;
SELECT doqscan_ensure_month(m, ARRAY['bench_samples'])
  FROM (SELECT DISTINCT date_trunc('month', started_at, 'UTC') AS m FROM bench_runs) b;
SELECT doqscan_ensure_ahead();
