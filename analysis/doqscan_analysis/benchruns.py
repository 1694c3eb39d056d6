"""dnsbench runs stored by `dnsbench --store` (bench_runs, bench_samples; migration
0009): one row per run of one target."""

from __future__ import annotations

import re

import pandas as pd

from .source import _frame, _has, _on_lake, _params

BENCH_COLUMNS = ["bench_id", "started_at", "label", "series", "target", "protocol", "variant", "address", "port",
                 "policy", "load", "workers", "elapsed_s", "sent", "answered", "qps", "success_rate",
                 "latency_mean_ms", "latency_p50_ms", "latency_p99_ms", "total_mean_ms", "total_p50_ms",
                 "path_loss", "seconds"]

# dnsbench.Sweep appends " loss=P%" to a run's label at each loss level; without it the
# label names the series (the sweep, or the policy comparison) the run belongs to.
_LOSS_TOKEN = re.compile(r"(?:^|\s)loss=\S+%")


@_on_lake
def bench_runs(conn, weeks=None) -> pd.DataFrame:
    """dnsbench runs (bench_runs, migration 0009), one row per stored run of one target,
    in start order. Columns: bench_id, started_at, label, series (the label without the
    " loss=P%" a loss sweep adds), target (dnsbench's "proto://addr:port"), protocol,
    variant, address, port, policy, load, workers, elapsed_s, sent, answered, qps,
    success_rate, latency_mean_ms (resolve time of the answered queries; NaN without
    any), latency_p50_ms, latency_p99_ms, total_mean_ms and total_p50_ms (issue to
    answer, session set-up included: the cold query latency of the fresh policy),
    path_loss (the per-direction loss a sweep set on the path, NaN outside a sweep) and
    seconds (rows of its bench_samples timeline). weeks: ISO weeks of started_at (UTC);
    None = all. Empty (with these columns) when the database has no bench_runs table
    or no run."""
    if not _has(conn, "bench_runs"):
        return pd.DataFrame(columns=BENCH_COLUMNS)
    df = _frame(conn, """
        SELECT r.bench_id, r.started_at, r.label, coalesce(r.report->>'target', '') AS target, r.protocol,
               r.variant, host(r.address) AS address, r.port, r.policy, r.load, r.workers, r.elapsed_s,
               r.sent, r.answered, r.qps, r.success_rate,
               CASE WHEN r.answered > 0 THEN r.latency_mean_ms END AS latency_mean_ms,
               CASE WHEN r.answered > 0 THEN r.latency_p50_ms END AS latency_p50_ms,
               CASE WHEN r.answered > 0 THEN r.latency_p99_ms END AS latency_p99_ms,
               CASE WHEN r.answered > 0 THEN r.total_mean_ms END AS total_mean_ms,
               CASE WHEN r.answered > 0 THEN (r.report->'total'->>'p50_ms')::float8 END AS total_p50_ms,
               (r.report->>'path_loss')::float8 AS path_loss,
               (SELECT count(*) FROM bench_samples s WHERE s.bench_id = r.bench_id) AS seconds
          FROM bench_runs r
         WHERE %(weeks)s::text[] IS NULL
            OR to_char(r.started_at AT TIME ZONE 'UTC', 'IYYY-"W"IW') = ANY(%(weeks)s::text[])
         ORDER BY r.started_at, r.bench_id""", _params(weeks, None))
    if df.empty:
        return pd.DataFrame(columns=BENCH_COLUMNS)
    df["series"] = [_LOSS_TOKEN.sub("", lab).strip() for lab in df["label"]]
    for col in ("latency_mean_ms", "latency_p50_ms", "latency_p99_ms", "total_mean_ms", "total_p50_ms",
                "path_loss", "qps", "success_rate", "elapsed_s"):
        if col in df:
            df[col] = df[col].astype(float)
    return df[BENCH_COLUMNS]
