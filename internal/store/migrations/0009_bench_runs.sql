-- Load benchmarks (cmd/dnsbench, internal/dnsbench): one row per (run, target) with
-- its summary and full JSON report, and its per-second timeline. run_key identifies a
-- benchmark run of one target (random, chosen when it starts): storing the same report
-- again adds nothing.

CREATE TABLE IF NOT EXISTS bench_runs (
    bench_id      bigserial PRIMARY KEY,
    run_key       text        NOT NULL UNIQUE,
    started_at    timestamptz NOT NULL,
    label         text        NOT NULL DEFAULT '',
    protocol      text        NOT NULL CHECK (protocol IN ('doudp', 'dotcp', 'dot', 'doh', 'doq', 'doh3')),
    variant       text        NOT NULL DEFAULT '',      -- DoH/DoH3: GET or POST
    address       inet        NOT NULL,
    port          integer     NOT NULL CHECK (port BETWEEN 1 AND 65535),
    policy        text        NOT NULL CHECK (policy IN ('fresh', 'persistent', 'resumed', '0rtt')),
    load          text        NOT NULL CHECK (load IN ('max', 'rate', 'ramp')),
    workers       integer     NOT NULL,
    rate          double precision,                     -- rate / ramp maximum (queries/s)
    elapsed_s     double precision NOT NULL,
    sent          bigint      NOT NULL,
    answered      bigint      NOT NULL,
    qps           double precision NOT NULL,
    success_rate  double precision NOT NULL,
    latency_mean_ms double precision,                   -- resolve time of answered queries
    latency_p50_ms  double precision,
    latency_p99_ms  double precision,
    total_mean_ms   double precision,                   -- including session set-up
    ramp_max_qps    double precision,                   -- ramp: highest rate sustained under the loss threshold
    report        jsonb       NOT NULL                  -- the whole dnsbench.Report
);
CREATE INDEX IF NOT EXISTS bench_runs_label_idx ON bench_runs (label, protocol);

CREATE TABLE IF NOT EXISTS bench_samples (
    bench_id  bigint  NOT NULL REFERENCES bench_runs (bench_id) ON DELETE CASCADE,
    second    integer NOT NULL CHECK (second >= 0),
    rate      double precision,                          -- paced rate at the second's start
    sent      bigint  NOT NULL,
    answered  bigint  NOT NULL,
    failed    bigint  NOT NULL,
    mean_ms   double precision,
    p99_ms    double precision,
    PRIMARY KEY (bench_id, second)
);
