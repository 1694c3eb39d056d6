#!/usr/bin/env python3
"""Benchmark: produce the full analysis report from a synthetic database of ~10 million
measurement rows (plus the matching campaigns, rtt_samples, handshake_analyses).

    .venv/bin/python bench/report_bench.py [--rows 10000000] [--db-name doqscan_bench] [--regenerate]
                                           [--out DIR] [--sequential] [--generate-only]

The database is generated once inside PostgreSQL (doqscan_analysis.synth, generate_series)
and reused by later runs unless --regenerate. Prints the generation time, table sizes,
the report's wall time in all and per notebook (they run at once unless --sequential),
the peak memory of the report process and its kernels together (PostgreSQL's backends
are the server's and not included), with the ratio to the goals (2 minutes, 4 GB), and
the load average while it ran. The machine is shared: quote the load with the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

import psycopg
from psycopg.conninfo import make_conninfo

from doqscan_analysis import db, report, synth

GOAL_SECONDS = 120
GOAL_MB = 4096


def bench_spec(rows: int) -> synth.Spec:
    """The default spec's pairs scaled x12 (about 3,500 resolvers in the last week), two
    vantage points, two key shares, all DoQ modes; hours chosen to reach `rows`."""
    base = synth.default_spec()
    for p in base.pairs:
        p.counts = [c * 12 for c in p.counts]
        p.shift *= 12
    base.doudp_counts = [c * 12 for c in base.doudp_counts]
    base.doudp_shift *= 12
    base.vantages = ["bench-a", "bench-b"]
    base.key_shares = ["x25519", "x25519mlkem768"]
    t = synth.expected(base)
    dox, non = t["dox"], t["targets"] - t["dox"]
    doq_rows = 1 + len(base.key_shares) + len(base.doq_modes)
    per_campaign = dox * (8 + doq_rows) + non * (2 + doq_rows)
    base.hours = max(1, round(rows / (per_campaign * len(base.vantages))))
    return base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--db-name", default="doqscan_bench")
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--out", default=None, help="report folder base (default: a temporary folder)")
    ap.add_argument("--sequential", action="store_true", help="execute the notebooks one after the other")
    args = ap.parse_args()

    server = db.server_url()  # $DOQSCAN_TEST_DATABASE_URL, $DATABASE_URL, else bin/dbctl url
    url = make_conninfo(server, dbname=args.db_name)
    spec = bench_spec(args.rows)
    with psycopg.connect(server, autocommit=True) as c:
        exists = c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (args.db_name,)).fetchone()
        if exists and args.regenerate:
            c.execute(f'DROP DATABASE "{args.db_name}" WITH (FORCE)')
            exists = None
        if not exists:
            c.execute(f'CREATE DATABASE "{args.db_name}"')
    with psycopg.connect(url, autocommit=True) as c:
        have = 0
        try:
            have = c.execute("SELECT count(*) FROM measurements").fetchone()[0]
        except psycopg.errors.UndefinedTable:
            pass
        db.apply_schema(c)  # schema.sql and migrations (idempotent): adds rtt_medians to older bench databases
        if have == 0:
            print(f"generating: {spec.hours} hours x {len(spec.vantages)} vantage points, "
                  f"{synth.expected(spec)['targets']} resolvers", flush=True)
            t0 = time.monotonic()
            synth.generate(c, spec, lambda m: print(f"  {time.monotonic() - t0:7.1f} s  {m}", flush=True))
            print(f"generated in {time.monotonic() - t0:.1f} s", flush=True)
        else:
            print(f"reusing {args.db_name} ({have:,} measurements); --regenerate to rebuild")
        for t in ("measurements", "rtt_samples", "handshake_analyses", "campaigns", "verification_results",
                  "scan_replies"):
            n = c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            print(f"  {t:22s} {n:>12,}")
        size = c.execute("SELECT pg_size_pretty(pg_database_size(current_database()))").fetchone()[0]
        print(f"  database size          {size:>12}")
    if args.generate_only:
        return 0
    out = args.out or tempfile.mkdtemp(prefix="doqscan-bench-")
    loads = [os.getloadavg()[0]]
    stop = threading.Event()

    def sample():  # 1-minute load average every 2 s: other helpers share the cores
        while not stop.wait(2):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    s = report.run(url, out, parallel=not args.sequential)
    secs = time.monotonic() - t0
    stop.set()
    sampler.join()
    loads.append(os.getloadavg()[0])
    peak, kids = s["peak_rss_mb"]["all_processes"], s["peak_rss_mb"]["largest_kernel"]
    print(f"report: {s['folder']} ({len(s['figures'])} figure files, notebooks "
          f"{'at once' if s.get('parallel') else 'one after the other'})")
    for n, v in s["notebooks"].items():
        print(f"  {n:15s} {v['seconds']:7.1f} s{'  FAILED: ' + v['error'].splitlines()[0] if v['error'] else ''}")
    print(f"report total: {secs:.1f} s (goal {GOAL_SECONDS} s: {secs / GOAL_SECONDS:.2f} of it)")
    print(f"peak RSS: {peak} MB for the report and its kernels together, largest kernel {kids} MB "
          f"(goal {GOAL_MB} MB: {peak / GOAL_MB:.2f} of it; PostgreSQL's backends not counted)")
    print(f"load average (1 min) while it ran: start {loads[0]:.1f}, max {max(loads):.1f}, "
          f"mean {sum(loads) / len(loads):.1f}, end {loads[-1]:.1f} on {os.cpu_count()} cores")
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
