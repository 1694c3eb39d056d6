-- What each DoQ resolver is, beyond where it is: its QUIC library (verify), the DNS
-- resolvers' designated encrypted endpoints (DDR, RFC 9462; verify), and the weekly
-- connection-policy and amplification-budget check (measure policy).

-- One row per verification result whose server sent anything QUIC: the library its
-- behaviour names (quic-go, quinn, aioquic, ngtcp2, ...) or 'unknown', the signature
-- rules that held and the evidence they were read from (transport parameters, the
-- first flight's packets, the close of a handshake offering an unknown ALPN, the Version
-- Negotiation list).
CREATE TABLE IF NOT EXISTS quic_stacks (
    run_id    bigint  NOT NULL REFERENCES verification_runs (run_id) ON DELETE CASCADE,
    address   inet    NOT NULL,
    port      integer NOT NULL CHECK (port BETWEEN 0 AND 65535),
    library   text    NOT NULL,                 -- a label of internal/verify's signature table, or 'unknown'
    matched   text[]  NOT NULL DEFAULT '{}',    -- the rules of that signature that held
    conflicts text[]  NOT NULL DEFAULT '{}',    -- why no label (evidence two libraries claim, or none)
    evidence  jsonb   NOT NULL,
    PRIMARY KEY (run_id, address, port)
);
CREATE INDEX IF NOT EXISTS quic_stacks_library_idx ON quic_stacks (library);

-- DDR: for every DNS/53 responder of the scan, the answer to _dns.resolver.arpa SVCB
-- (RFC 9462 §4), one row per responder asked.
CREATE TABLE IF NOT EXISTS ddr_queries (
    run_id     bigint      NOT NULL REFERENCES verification_runs (run_id) ON DELETE CASCADE,
    address    inet        NOT NULL,            -- the DNS/53 responder asked
    status     text        NOT NULL CHECK (status IN (
                   'designations',  -- SVCB records in the answer
                   'none',          -- NOERROR without SVCB records (no DDR)
                   'nxdomain',
                   'refused',
                   'dns-error',     -- another rcode
                   'timeout',
                   'bad-response',  -- a reply that is not a valid answer to the query
                   'error')),
    rcode      smallint,
    records    smallint,                        -- SVCB records in the answer
    detail     text        NOT NULL DEFAULT '',
    queried_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, address)
);

-- One row per designated endpoint: an SVCB record of a ddr_queries answer (ServiceMode,
-- priority > 0), with its SvcParams. Endpoints are the record's address hints (RFC 9460
-- §7.3) on its port (or the ALPN's default: 853 for doq and dot, 443 for h2/h3);
-- verify contacts the DoQ ones in the same run (verification_results of the same
-- run_id and (address, port)).
CREATE TABLE IF NOT EXISTS ddr_designations (
    run_id     bigint   NOT NULL REFERENCES verification_runs (run_id) ON DELETE CASCADE,
    resolver   inet     NOT NULL,               -- the DNS/53 responder that designated it
    seq        smallint NOT NULL,               -- the record's position in the answer
    priority   integer  NOT NULL,
    target     text     NOT NULL,               -- TargetName ('.' : the owner, RFC 9460 §2.5)
    alpns      text[]   NOT NULL DEFAULT '{}',
    port       integer  CHECK (port BETWEEN 1 AND 65535),  -- NULL: the ALPN's default
    dohpath    text,
    ipv4hints  inet[]   NOT NULL DEFAULT '{}',
    ipv6hints  inet[]   NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, resolver, seq)
);

-- The weekly connection check (measure policy): per resolver endpoint and protocol, what
-- its server allows a connection, and per DoQ endpoint, the amplification budget.
CREATE TABLE IF NOT EXISTS policy_runs (
    run_id              bigserial PRIMARY KEY,
    iso_week            text        NOT NULL CHECK (iso_week ~ '^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$'),
    vantage_id          text        NOT NULL REFERENCES vantage_points (vantage_id),
    label               text        NOT NULL DEFAULT 'weekly',
    verification_run_id bigint      REFERENCES verification_runs (run_id),
    source              text        NOT NULL DEFAULT 'verification' CHECK (source IN ('verification', 'file')),
    config              jsonb       NOT NULL DEFAULT '{}',
    started_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    status              text        NOT NULL DEFAULT 'running'
                                    CHECK (status IN ('running', 'ok', 'failed', 'interrupted')),
    summary             jsonb,
    provenance          jsonb,
    UNIQUE (iso_week, vantage_id, label)
);

CREATE TABLE IF NOT EXISTS connection_policies (
    run_id              bigint      NOT NULL REFERENCES policy_runs (run_id) ON DELETE CASCADE,
    address             inet        NOT NULL,
    port                integer     NOT NULL CHECK (port BETWEEN 1 AND 65535),
    protocol            text        NOT NULL CHECK (protocol IN ('doq', 'dot', 'doh')),
    status              text        NOT NULL,   -- measure status of the first connection ('ok': it answered)
    queries_sent        integer,                -- on the counting connection
    queries_answered    integer,                -- answered before it ended
    closed_by_server    boolean,                -- the server ended it before the last query
    close_detail        text,                   -- how it ended (close code, GOAWAY, EOF, reset)
    idle_advertised_ms  bigint,                 -- DoQ: the server's max_idle_timeout
    idle_alive_ms       bigint,                 -- the longest idle wait after which a query was answered
    idle_dead_ms        bigint,                 -- the shortest idle wait after which it was not (NULL: none tried failed)
    max_streams         bigint,                 -- DoQ initial_max_streams_bidi; DoH SETTINGS_MAX_CONCURRENT_STREAMS
    token_issued        boolean,                -- DoQ: a NEW_TOKEN frame arrived
    token_honoured      boolean,                -- DoQ: the token skipped a Retry or a stall a tokenless connection met (NULL: nothing to skip)
    retry_policy        text        CHECK (retry_policy IN ('never', 'first', 'always')),
    zero_rtt            boolean,                -- DoQ: early data accepted
    resumed             boolean,                -- the session ticket resumed a session
    ticket_lifetime_s   bigint,                 -- the lifetime the server's NewSessionTicket gave
    detail              jsonb       NOT NULL DEFAULT '{}',
    checked_at          timestamptz NOT NULL,
    PRIMARY KEY (run_id, address, port, protocol)
);

CREATE TABLE IF NOT EXISTS amplification_probes (
    run_id               bigint      NOT NULL REFERENCES policy_runs (run_id) ON DELETE CASCADE,
    address              inet        NOT NULL,
    port                 integer     NOT NULL CHECK (port BETWEEN 1 AND 65535),
    initial_size         integer     NOT NULL CHECK (initial_size BETWEEN 1200 AND 1500),
    key_share            text        NOT NULL CHECK (key_share IN ('x25519', 'x25519mlkem768')),
    status               text        NOT NULL,  -- measure status of the handshake
    retry_seen           boolean,
    client_bytes         integer,               -- our bytes before the server's first flight
    server_bytes_pre_ack integer,               -- the server's bytes before it waited for us
    budget               integer,               -- 3 x client_bytes
    stalled              boolean,               -- the server stopped at the budget and waited an RTT
    stall_ns             bigint,
    round_trips          smallint,
    cause                text,                  -- handshake_analyses' causes
    handshake_ns         bigint,
    chain_bytes          integer,               -- DER bytes of the certificates the server sent
    chain_certs          smallint,
    checked_at           timestamptz NOT NULL,
    PRIMARY KEY (run_id, address, port, initial_size, key_share)
);

-- The weekly chain runs conncheck under jobrun after verify.
ALTER TABLE job_runs DROP CONSTRAINT IF EXISTS job_runs_job_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_job_check
    CHECK (job IN ('scan', 'verify', 'conncheck', 'measure', 'report', 'blocklist')) NOT VALID;
