-- doqscan: PostgreSQL schema, version 1 (the baseline).
--
-- Applied by every tool at start (internal/store embeds this file). Every statement is
-- idempotent: applying the file twice changes nothing. Later changes go into
-- internal/store/migrations/NNNN_name.sql, each applied once and recorded in
-- schema_migrations; a database whose newest version is above what a binary knows is
-- refused by that binary.
--
-- Conventions
--   * Natural keys are UNIQUE or PRIMARY KEY, so every write is an
--     INSERT ... ON CONFLICT DO NOTHING (or DO UPDATE) and a re-run never duplicates rows.
--   * Rows that children reference by a key the client must know before the database
--     answers (measurements, qlogs) use a UUID the client derives from the natural key
--     (UUIDv5, see internal/store/ids.go), so COPY can load parents and children at once.
--   * Times are timestamptz; durations are bigint nanoseconds (*_ns).
--   * QUIC versions are bigint (a uint32 on the wire); addresses are inet, prefixes cidr.
--   * Classifications are text with CHECK constraints (easy to extend in a migration).

CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------------------------
-- Who measures from where.
CREATE TABLE IF NOT EXISTS vantage_points (
    vantage_id   text PRIMARY KEY CHECK (vantage_id ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
    description  text        NOT NULL DEFAULT '',
    address      inet,                   -- the scanner's source address, if known
    asn          bigint,
    country      text,
    latitude     double precision,
    longitude    double precision,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- External datasets (GeoIP databases, ...), recorded with their build date and hash so
-- every derived row can say which version it came from.
CREATE TABLE IF NOT EXISTS datasets (
    dataset_id     bigserial PRIMARY KEY,
    kind           text        NOT NULL CHECK (kind IN ('geoip-city', 'geoip-asn', 'geoip-country', 'other')),
    database_type  text        NOT NULL DEFAULT '',   -- mmdb metadata database_type
    build_time     timestamptz NOT NULL,              -- mmdb metadata build_epoch
    sha256         bytea       NOT NULL CHECK (octet_length(sha256) = 32),
    path           text        NOT NULL DEFAULT '',
    loaded_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (sha256)
);

-- Generic record of scheduled job runs (advisory-locked; a missed hour is a row too).
CREATE TABLE IF NOT EXISTS job_runs (
    job         text        NOT NULL CHECK (job IN ('scan', 'verify', 'measure', 'report', 'blocklist')),
    run_key     text        NOT NULL,          -- ISO week or hour the run is for
    vantage_id  text        NOT NULL REFERENCES vantage_points (vantage_id),
    host        text        NOT NULL DEFAULT '',
    status      text        NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'missed', 'skipped-locked')),
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    detail      text        NOT NULL DEFAULT '',
    PRIMARY KEY (job, run_key, vantage_id)
);

-- ---------------------------------------------------------------------------------------
-- Scans (cmd/zprobe). One row per (ISO week, vantage point, label, shard); the ports of
-- a scan each get a scan_runs row (zmap scans one port per run).
CREATE TABLE IF NOT EXISTS scans (
    scan_id        bigserial PRIMARY KEY,
    iso_week       text        NOT NULL CHECK (iso_week ~ '^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$'),
    vantage_id     text        NOT NULL REFERENCES vantage_points (vantage_id),
    label          text        NOT NULL DEFAULT 'weekly',
    shard          integer     NOT NULL DEFAULT 0 CHECK (shard >= 0),
    shards         integer     NOT NULL DEFAULT 1 CHECK (shards >= 1 AND shard < shards),
    seed           bigint,                                   -- shared by all shards
    ports          integer[]   NOT NULL,
    probe_version  bigint,                                   -- QUIC version in the VN probe
    sender         text        NOT NULL DEFAULT 'zmap' CHECK (sender IN ('zmap', 'builtin')),
    targets        text        NOT NULL DEFAULT '',          -- prefixes / allowlist / hitlist
    rate_pps       integer,
    bandwidth      text,
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    status         text        NOT NULL DEFAULT 'running'
                               CHECK (status IN ('running', 'ok', 'failed', 'interrupted')),
    summary        jsonb,
    UNIQUE (iso_week, vantage_id, label, shard)
);
CREATE INDEX IF NOT EXISTS scans_week_idx ON scans (iso_week);

CREATE TABLE IF NOT EXISTS scan_runs (
    scan_id        bigint      NOT NULL REFERENCES scans (scan_id) ON DELETE CASCADE,
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    probe_kind     text        NOT NULL CHECK (probe_kind IN ('quic-vn', 'dns')),
    probe_sha256   bytea       CHECK (probe_sha256 IS NULL OR octet_length(probe_sha256) = 32),
    zmap_args      text[]      NOT NULL DEFAULT '{}',
    raw_output     text        NOT NULL DEFAULT '',          -- path of zmap's raw CSV on disk
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    status         text        NOT NULL DEFAULT 'running'
                               CHECK (status IN ('running', 'ok', 'failed', 'interrupted')),
    probes_sent    bigint,
    replies        bigint,
    blocklisted    bigint,                                   -- addresses excluded
    PRIMARY KEY (scan_id, port)
);

-- Every validated reply of a scan, classified. A (scan, port, address) answers once; a
-- duplicate reply (zmap may see several) is dropped by the key.
CREATE TABLE IF NOT EXISTS scan_replies (
    scan_id        bigint      NOT NULL,                  -- -> scans: set-based check below
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    address        inet        NOT NULL,
    sport          integer,                                  -- the reply's source port
    reply_kind     text        NOT NULL CHECK (reply_kind IN (
                       'quic-vn',          -- valid Version Negotiation echoing our CIDs
                       'quic-vn-invalid',  -- VN-shaped but malformed / wrong CIDs
                       'quic-other',       -- other QUIC long/short header packet
                       'not-quic',         -- a UDP answer that is not QUIC
                       'dns',              -- a parseable DNS reply (UDP/53)
                       'dns-malformed',    -- UDP/53 answer that is not a valid DNS reply
                       'icmp-unreach')),   -- ICMP destination unreachable
    quic_versions  bigint[],                                 -- advertised, in packet order
    grease_count   smallint,                                 -- how many were 0x?a?a?a?a
    vn_cid_match   boolean,                                  -- DCID/SCID echo our probe's
    dns_rcode      smallint,
    dns_answers    smallint,
    dns_ra         boolean,
    icmp_type      smallint,
    icmp_code      smallint,
    payload_len    integer,
    payload        bytea,                                    -- first bytes, for re-parsing
    received_at    timestamptz NOT NULL,
    PRIMARY KEY (scan_id, port, address)
);
CREATE INDEX IF NOT EXISTS scan_replies_kind_idx ON scan_replies (scan_id, reply_kind);
CREATE INDEX IF NOT EXISTS scan_replies_addr_idx ON scan_replies (address);

-- ---------------------------------------------------------------------------------------
-- Verification (cmd/verify).
CREATE TABLE IF NOT EXISTS verification_runs (
    run_id         bigserial PRIMARY KEY,
    iso_week       text        NOT NULL CHECK (iso_week ~ '^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$'),
    vantage_id     text        NOT NULL REFERENCES vantage_points (vantage_id),
    label          text        NOT NULL DEFAULT 'weekly',
    scan_id        bigint      REFERENCES scans (scan_id),   -- source scan, if any
    source         text        NOT NULL DEFAULT 'scan' CHECK (source IN ('scan', 'file')),
    config         jsonb       NOT NULL DEFAULT '{}',        -- ALPNs, versions, timeouts, SNI list
    city_dataset   bigint      REFERENCES datasets (dataset_id),
    asn_dataset    bigint      REFERENCES datasets (dataset_id),
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    status         text        NOT NULL DEFAULT 'running'
                               CHECK (status IN ('running', 'ok', 'failed', 'interrupted')),
    summary        jsonb,
    UNIQUE (iso_week, vantage_id, label)
);

-- Certificates, deduplicated by the SHA-256 of their DER.
CREATE TABLE IF NOT EXISTS certificates (
    sha256         bytea PRIMARY KEY CHECK (octet_length(sha256) = 32),
    der            bytea       NOT NULL,
    subject        text        NOT NULL DEFAULT '',
    subject_cn     text        NOT NULL DEFAULT '',
    sans           text[]      NOT NULL DEFAULT '{}',        -- DNS names and IP addresses
    issuer         text        NOT NULL DEFAULT '',
    issuer_cn      text        NOT NULL DEFAULT '',
    serial         text        NOT NULL DEFAULT '',
    not_before     timestamptz,
    not_after      timestamptz,
    key_type       text        NOT NULL DEFAULT '',          -- rsa, ecdsa, ed25519, ...
    key_bits       integer,
    signature_alg  text        NOT NULL DEFAULT '',
    is_ca          boolean     NOT NULL DEFAULT false,
    self_signed    boolean     NOT NULL DEFAULT false,
    first_seen     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS certificates_cn_idx ON certificates (subject_cn);

CREATE TABLE IF NOT EXISTS verification_results (
    run_id             bigint      NOT NULL REFERENCES verification_runs (run_id) ON DELETE CASCADE,
    address            inet        NOT NULL,
    port               integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    outcome            text        NOT NULL CHECK (outcome IN (
                           'doq-verified',      -- DoQ ALPN + a DNS answer (NOERROR/NXDOMAIN)
                           'doq-refused',       -- DoQ handshake ok, DNS REFUSED
                           'doq-dns-error',     -- DoQ handshake ok, other rcode / bad reply / no reply
                           'quic-not-doq',      -- QUIC, but no DoQ ALPN accepted
                           'version-mismatch',  -- no common QUIC version
                           'sni-required',      -- handshake only with a server name
                           'timeout',
                           'tls-error',
                           'protocol-error',
                           'unreachable')),
    detail             text        NOT NULL DEFAULT '',
    quic_version       bigint,
    alpn               text,                                  -- = the DoQ version
    tls_version        integer,                               -- 0x0304 = TLS 1.3
    tls_cipher         text,
    handshake_ns       bigint,
    sni                text,                                  -- the server name that worked
    sni_source         text        CHECK (sni_source IN ('none', 'list', 'san')),
    cert_valid_for_sni boolean,                               -- chain verifies and names the SNI
    cert_chain         bytea[],                               -- SHA-256s, leaf first
    scan_versions      bigint[],                              -- advertised in the scan's VN
    dns_rcode          smallint,
    dns_answers        smallint,
    attempts           smallint    NOT NULL DEFAULT 1,
    verified_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, address, port)
);
CREATE INDEX IF NOT EXISTS verification_results_outcome_idx ON verification_results (run_id, outcome);
CREATE INDEX IF NOT EXISTS verification_results_addr_idx ON verification_results (address);

-- Resolvers and where they are, per GeoIP database version.
CREATE TABLE IF NOT EXISTS resolvers (
    address        inet PRIMARY KEY,
    first_seen     timestamptz NOT NULL DEFAULT now(),
    last_seen      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS resolver_geo (
    address        inet        NOT NULL REFERENCES resolvers (address) ON DELETE CASCADE,
    city_dataset   bigint      NOT NULL REFERENCES datasets (dataset_id),
    asn_dataset    bigint      NOT NULL REFERENCES datasets (dataset_id),
    asn            bigint,
    as_org         text,
    country        text,                                      -- ISO 3166-1 alpha-2
    continent      text,                                      -- AF AN AS EU NA OC SA
    city           text,
    latitude       double precision,
    longitude      double precision,
    PRIMARY KEY (address, city_dataset, asn_dataset)
);
CREATE INDEX IF NOT EXISTS resolver_geo_asn_idx ON resolver_geo (asn);

-- ---------------------------------------------------------------------------------------
-- Measurement campaigns (cmd/measure). One campaign row per hourly round.
CREATE TABLE IF NOT EXISTS campaigns (
    campaign_id    bigserial PRIMARY KEY,
    vantage_id     text        NOT NULL REFERENCES vantage_points (vantage_id),
    label          text        NOT NULL DEFAULT 'hourly',
    round_hour     timestamptz NOT NULL CHECK (date_trunc('hour', round_hour) = round_hour),
    run_id         bigint      REFERENCES verification_runs (run_id),  -- target source
    config         jsonb       NOT NULL DEFAULT '{}',     -- modes, query name, key shares, timeouts
    planned        integer,                               -- resolvers in the round
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    status         text        NOT NULL DEFAULT 'running'
                               CHECK (status IN ('running', 'ok', 'failed', 'interrupted')),
    summary        jsonb,
    UNIQUE (vantage_id, label, round_hour)
);
CREATE INDEX IF NOT EXISTS campaigns_hour_idx ON campaigns (round_hour);

-- qlog of one QUIC connection (JSON-SEQ, compressed). Linked from measurements.qlog_id.
CREATE TABLE IF NOT EXISTS qlogs (
    qlog_id        uuid PRIMARY KEY,
    campaign_id    bigint      NOT NULL REFERENCES campaigns (campaign_id) ON DELETE CASCADE,
    address        inet        NOT NULL,
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    odcid          bytea,                                 -- original destination connection ID
    encoding       text        NOT NULL CHECK (encoding IN ('gzip', 'zstd', 'identity')),
    format         text        NOT NULL DEFAULT 'sqlog' CHECK (format IN ('sqlog', 'qlog')),
    raw_size       integer     NOT NULL,
    data           bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS qlogs_campaign_idx ON qlogs (campaign_id);

CREATE TABLE IF NOT EXISTS measurements (
    measurement_id uuid PRIMARY KEY,                      -- UUIDv5 of the natural key below
    campaign_id    bigint      NOT NULL,                  -- -> campaigns: set-based check below
    address        inet        NOT NULL,
    protocol       text        NOT NULL CHECK (protocol IN ('doudp', 'dotcp', 'dot', 'doh', 'doq', 'doh3')),
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    variant        text        NOT NULL DEFAULT '',       -- DoH: GET / POST
    mode           text        NOT NULL DEFAULT 'fresh'
                               CHECK (mode IN ('fresh', 'resumed', '0rtt', 'persistent')),
    key_share      text        NOT NULL DEFAULT '',       -- x25519, x25519mlkem768, ...
    phase          text        NOT NULL CHECK (phase IN ('warmup', 'measured')),
    seq            smallint    NOT NULL DEFAULT 0,        -- query number on a persistent session
    started_at     timestamptz NOT NULL,
    handshake_ns   bigint,                                -- NULL for DoUDP / reused sessions
    resolve_ns     bigint,
    status         text        NOT NULL CHECK (status IN (
                       'ok',               -- valid DNS response with an rcode
                       'timeout',
                       'conn-refused',     -- TCP RST / ICMP port unreachable
                       'reset',            -- connection reset / stream reset mid-exchange
                       'tls-error',
                       'quic-error',       -- QUIC handshake or transport error
                       'alpn-mismatch',
                       'http-error',       -- DoH non-200
                       'bad-response',     -- malformed / wrong length / wrong ID
                       'network-error',
                       'error')),
    error          text        NOT NULL DEFAULT '',
    rcode          smallint,
    answers        text[],                                -- A records in the answer
    tls_version    integer,
    tls_cipher     text,
    quic_version   bigint,
    alpn           text,
    token_received boolean,                               -- NEW_TOKEN seen on this connection
    token_used     boolean,                               -- our Initial carried a token
    retry_seen     boolean,
    vn_seen        boolean,
    resumed        boolean,                               -- TLS session resumed
    used_0rtt      boolean,
    tfo            boolean,                               -- TCP Fast Open used
    qlog_id        uuid                                   -- -> qlogs: set-based check below
    -- The natural key (campaign_id, address, protocol, port, variant, mode, key_share,
    -- phase, seq) is enforced through measurement_id, its UUIDv5: a second unique index
    -- on nine columns would halve the COPY rate for nothing.
);
CREATE INDEX IF NOT EXISTS measurements_campaign_proto_idx ON measurements (campaign_id, protocol, phase);

-- RTT samples to the same port with the same transport as a successful measurement.
CREATE TABLE IF NOT EXISTS rtt_samples (
    campaign_id    bigint      NOT NULL,                  -- -> campaigns: set-based check below
    address        inet        NOT NULL,
    transport      text        NOT NULL CHECK (transport IN ('udp', 'tcp', 'quic', 'icmp')),
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    seq            smallint    NOT NULL,
    sent_at        timestamptz NOT NULL,
    rtt_ns         bigint,                                -- NULL when unanswered
    status         text        NOT NULL CHECK (status IN ('ok', 'timeout', 'rst', 'icmp', 'error')),
    detail         text        NOT NULL DEFAULT '',
    PRIMARY KEY (campaign_id, address, transport, port, seq)
);

-- Why a handshake took what it took (derived from the qlog and the RTT).
CREATE TABLE IF NOT EXISTS handshake_analyses (
    measurement_id        uuid PRIMARY KEY REFERENCES measurements (measurement_id) ON DELETE CASCADE,
    rtt_ns                bigint,                         -- the RTT the ratio is taken against
    ratio                 real,                           -- handshake_ns / rtt_ns
    round_trips           smallint,                       -- counted from the packet exchange
    one_rtt               boolean NOT NULL DEFAULT false,
    version_negotiation   boolean NOT NULL DEFAULT false,
    retry                 boolean NOT NULL DEFAULT false,
    amplification_stall   boolean NOT NULL DEFAULT false,
    loss                  boolean NOT NULL DEFAULT false,
    client_initial_bytes  integer,                        -- client bytes before the server stalled
    server_bytes_pre_ack  integer,                        -- server bytes before our first ACK
    stall_ns              bigint,
    cause                 text    NOT NULL CHECK (cause IN ('1rtt', 'retry', 'version-negotiation',
                                     'amplification', 'loss', 'multiple', 'unknown')),
    detail                jsonb
);

-- What a resolver supports, checked per campaign (TFO, edns-tcp-keepalive, 0-RTT, tickets).
CREATE TABLE IF NOT EXISTS resolver_features (
    campaign_id    bigint      NOT NULL REFERENCES campaigns (campaign_id) ON DELETE CASCADE,
    address        inet        NOT NULL,
    protocol       text        NOT NULL CHECK (protocol IN ('doudp', 'dotcp', 'dot', 'doh', 'doq', 'doh3')),
    port           integer     NOT NULL CHECK (port BETWEEN 0 AND 65535),
    feature        text        NOT NULL CHECK (feature IN ('tfo', 'edns-tcp-keepalive', '0rtt',
                                   'session-ticket', 'new-token', 'retry')),
    supported      boolean,                               -- NULL: could not tell
    detail         text        NOT NULL DEFAULT '',
    PRIMARY KEY (campaign_id, address, protocol, port, feature)
);

-- ---------------------------------------------------------------------------------------
-- Opt-out requests from the web page; accepted ones feed the scan blocklist.
CREATE TABLE IF NOT EXISTS optout_requests (
    request_id     bigserial PRIMARY KEY,
    prefix         cidr        NOT NULL,
    email          text        NOT NULL CHECK (length(email) <= 254),
    note           text        NOT NULL DEFAULT '' CHECK (length(note) <= 2000),
    source_addr    inet,
    status         text        NOT NULL DEFAULT 'accepted' CHECK (status IN ('accepted', 'withdrawn')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (prefix, email)
);
CREATE INDEX IF NOT EXISTS optout_prefix_idx ON optout_requests USING gist (prefix inet_ops);

-- ---------------------------------------------------------------------------------------
-- Set-based foreign keys for the three high-volume tables (scan_replies, measurements,
-- rtt_samples). A declared FOREIGN KEY checks (and share-locks the parent) once per row,
-- which cost more than half of the COPY rate. These statement-level triggers check each
-- COPY or INSERT batch against its parent table in one query, and deleting a scan or a
-- campaign deletes its rows as ON DELETE CASCADE would. What they do not do is lock the
-- parent against a concurrent delete; scans and campaigns are only deleted by hand.
CREATE OR REPLACE FUNCTION doqscan_check_parent() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    IF TG_TABLE_NAME = 'scan_replies' THEN
        SELECT n.scan_id::text INTO missing FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM scans p WHERE p.scan_id = n.scan_id) LIMIT 1;
    ELSIF TG_TABLE_NAME = 'measurements' THEN
        SELECT n.campaign_id::text INTO missing FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM campaigns p WHERE p.campaign_id = n.campaign_id) LIMIT 1;
        IF missing IS NULL THEN
            SELECT 'qlog ' || n.qlog_id::text INTO missing FROM new_rows n
             WHERE n.qlog_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM qlogs q WHERE q.qlog_id = n.qlog_id) LIMIT 1;
        END IF;
    ELSE
        SELECT n.campaign_id::text INTO missing FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM campaigns p WHERE p.campaign_id = n.campaign_id) LIMIT 1;
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

CREATE OR REPLACE FUNCTION doqscan_cascade_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'scans' THEN
        DELETE FROM scan_replies r USING old_rows o WHERE r.scan_id = o.scan_id;
    ELSIF TG_TABLE_NAME = 'campaigns' THEN
        DELETE FROM measurements m USING old_rows o WHERE m.campaign_id = o.campaign_id;
        DELETE FROM rtt_samples r USING old_rows o WHERE r.campaign_id = o.campaign_id;
    ELSIF TG_TABLE_NAME = 'qlogs' THEN
        UPDATE measurements m SET qlog_id = NULL FROM old_rows o WHERE m.qlog_id = o.qlog_id;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER scans_cascade AFTER DELETE ON scans
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_cascade_delete();
CREATE OR REPLACE TRIGGER campaigns_cascade AFTER DELETE ON campaigns
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_cascade_delete();
CREATE OR REPLACE TRIGGER qlogs_cascade AFTER DELETE ON qlogs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_cascade_delete();

INSERT INTO schema_migrations (version, name) VALUES (1, 'baseline schema.sql')
ON CONFLICT (version) DO NOTHING;
