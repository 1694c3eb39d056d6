#!/usr/bin/env python3
"""Benchmark of the data release and of the analysis over it (docs/data-release.md).

    .venv/bin/python bench/release_bench.py [--steps export,year,compare,duckdb,spark] [--weeks 52]
                                            [--dir var/bench] [--keep]

Steps (each prints its figures):
  export   `dataset export` of the ~10-million-measurement database doqscan_bench
           (bench/report_bench.py builds it): rows/s (all tables and measurements), bytes
           per measurement in Parquet and in PostgreSQL (the database's size / measurements)
  compare  the full report at 10^7 rows from PostgreSQL and from that release (DuckDB), in
           one run: times, peak memory, and their ratio; the CSVs must be equal
  year     a synthetic year straight to Parquet (synth.write_year: one vantage point, 52
           weeks of hourly campaigns shaped like the study's scale, ~1.8 x 10^8
           measurements, RTT samples and analyses in proportion) from a template release
  duckdb   the full report over the year on DuckDB: time and peak memory (goal: 2 minutes,
           4 GB on 2 cores); the first run writes the facts cache, then a second reads it
  spark    the same report on Spark local[2]: time; its CSVs must equal DuckDB's

The machine is shared: quote the load average printed with the figures. Big files go
under --dir (var/bench); --keep keeps them, else the year and the 10^7 release are
deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psycopg
from psycopg.conninfo import make_conninfo

from doqscan_analysis import compare, db, report, synth

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GOAL_SECONDS = 120
GOAL_MB = 4096


def du(path: str) -> int:
    """Bytes of a release's files, without the report's caches (.cache/: the facts cache
    a DuckDB report writes beside them)."""
    total = 0
    for d, subdirs, fs in os.walk(path):
        if d == path and ".cache" in subdirs:
            subdirs.remove(".cache")
        total += sum(os.path.getsize(os.path.join(d, f)) for f in fs)
    return total


def export(url: str, out: str) -> tuple[float, dict]:
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(ROOT, "bin", "dataset"), "export", "--force", "--log-level", "warn", out],
                       env={**os.environ, "DATABASE_URL": url}, check=True, capture_output=True, text=True)
    return time.monotonic() - t0, json.loads(r.stdout)


def run_report(source: str, out: str, engine: str = "duckdb") -> dict:
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    s = report.run(source, out, engine=engine)
    s["wall"] = time.monotonic() - t0
    s["load"] = (load0, os.getloadavg()[0])
    return s


def show(label: str, s: dict) -> None:
    nb = ", ".join(f"{n} {v['seconds']} s{' FAILED' if v['error'] else ''}" for n, v in s["notebooks"].items())
    print(f"{label}: {s['wall']:.1f} s ({s['wall'] / GOAL_SECONDS:.2f} of {GOAL_SECONDS} s), peak RSS "
          f"{s['peak_rss_mb']['all_processes']} MB ({s['peak_rss_mb']['all_processes'] / GOAL_MB:.2f} of {GOAL_MB} MB); "
          f"{nb}; load average {s['load'][0]:.1f} -> {s['load'][1]:.1f}", flush=True)


def template_spec() -> synth.Spec:
    """One vantage point, one campaign of ~20,000 measurements (about 1,800 resolvers):
    a year of hourly campaigns is ~1.8 x 10^8 measurements, the study's scale."""
    base = synth.default_spec()
    for p in base.pairs:
        p.counts = [c * 6 for c in p.counts]
        p.shift *= 6
    base.doudp_counts = [c * 6 for c in base.doudp_counts]
    base.doudp_shift *= 6
    base.vantages = ["year-a"]
    base.key_shares = ["x25519", "x25519mlkem768"]
    base.hours = 1
    return base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="export,compare,year,duckdb,spark")
    ap.add_argument("--weeks", type=int, default=52)
    ap.add_argument("--dir", default=os.path.join(ROOT, "var", "bench"))
    ap.add_argument("--db-name", default="doqscan_bench", help="the 10^7 database (bench/report_bench.py)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--year", default="", help="the release the duckdb and spark steps read (default: DIR/year)")
    args = ap.parse_args()
    steps = set(args.steps.split(","))
    os.makedirs(args.dir, exist_ok=True)
    server = db.server_url()
    subprocess.run(["go", "build", "-o", "bin/", "./cmd/dataset"], cwd=ROOT, check=True,
                   env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/local/go/bin"})
    rel10 = os.path.join(args.dir, "release-1e7")
    year = args.year or os.path.join(args.dir, "year")
    reports = tempfile.mkdtemp(prefix="doqscan-release-bench-")

    if "export" in steps or "compare" in steps:
        url = make_conninfo(server, dbname=args.db_name)
        with psycopg.connect(url) as c:
            n = c.execute("SELECT count(*) FROM measurements").fetchone()[0]
            pg_bytes = c.execute("SELECT pg_database_size(current_database())").fetchone()[0]
            # a partitioned table's own size is 0: sum its partitions (pg_partition_tree
            # lists a plain table alone)
            pg_tables = c.execute("""SELECT sum(pg_total_relation_size(p.relid)) FROM unnest(ARRAY['measurements',
                                       'rtt_samples', 'handshake_analyses', 'resolver_features', 'campaigns', 'scan_replies',
                                       'verification_results', 'certificates', 'resolver_geo', 'resolvers', 'scans',
                                       'verification_runs', 'qlogs']::regclass[]) t, pg_partition_tree(t) p""").fetchone()[0]
        if "export" in steps or not os.path.exists(os.path.join(rel10, "manifest.json")):
            secs, s = export(url, rel10)
            rows = sum(s["rows_written"].values())
            size = du(rel10)
            print(f"export of {args.db_name} ({n:,} measurements): {secs:.1f} s, {rows / secs:,.0f} rows/s over all "
                  f"tables ({rows:,} rows), {s['rows_written'].get('measurements', 0) / secs:,.0f} measurements/s; "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
            print(f"bytes per measurement: Parquet {size / n:.1f} ({size / 1e9:.2f} GB, every table), PostgreSQL "
                  f"{pg_bytes / n:.1f} ({pg_bytes / 1e9:.2f} GB database; {pg_tables / n:.1f} for the exported "
                  f"tables with their indexes, without the caches): {pg_bytes / size:.1f}x smaller", flush=True)
        if "compare" in steps:
            # PostgreSQL's caches (rtt_medians, measurement_facts) are filled by the first
            # report after a campaign finishes: warm them, then time a warm report
            from doqscan_analysis import load
            with load.connect(url) as c:
                load.refresh_rtt_medians(c)
                load.refresh_measurement_facts(c)
            a = run_report(url, os.path.join(reports, "pg"))
            show(f"report at {n:,} measurements from PostgreSQL", a)
            b = run_report(rel10, os.path.join(reports, "parquet"))
            show(f"report at {n:,} measurements from Parquet (DuckDB)", b)
            print(f"ratio Parquet/PostgreSQL: time {b['wall'] / a['wall']:.2f}, peak memory "
                  f"{b['peak_rss_mb']['all_processes'] / a['peak_rss_mb']['all_processes']:.2f}", flush=True)
            names = compare.report_csvs(a["folder"], b["folder"])
            print(f"the {len(names)} CSV tables are equal", flush=True)

    if "year" in steps:
        tmpl = os.path.join(args.dir, "template")
        name = "doqscan_bench_template"
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')
        turl = make_conninfo(server, dbname=name)
        with psycopg.connect(turl, autocommit=True) as c:
            db.apply_schema(c)
            synth.generate(c, template_spec())
        export(turl, tmpl)
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(year, ignore_errors=True)
        t0 = time.monotonic()
        totals = synth.write_year(tmpl, year, weeks=args.weeks, progress=lambda m: print("  " + m, flush=True))
        secs = time.monotonic() - t0
        size = du(year)
        print(f"synthetic year: {args.weeks} weeks, {totals['measurements']:,} measurements, "
              f"{totals['rtt_samples']:,} RTT samples, {totals['handshake_analyses']:,} handshake analyses; "
              f"{size / 1e9:.2f} GB ({size / totals['measurements']:.1f} bytes per measurement), written in {secs:.0f} s",
              flush=True)

    duck = None
    if "duckdb" in steps:
        # the first report over a release writes its facts cache (docs/analysis.md), the
        # next ones read it: time both
        cold = not os.path.isdir(os.path.join(year, ".cache", "facts"))
        duck = run_report(year, os.path.join(reports, "year-duckdb"))
        show(f"report over {year} on DuckDB ({'cold: writes the facts cache' if cold else 'facts cache warm'})", duck)
        if cold:
            duck = run_report(year, os.path.join(reports, "year-duckdb-warm"))
            show(f"report over {year} on DuckDB (facts cache warm)", duck)
    if "spark" in steps:
        sp = run_report(year, os.path.join(reports, "year-spark"), engine="spark")
        show(f"report over {year} on Spark local[2]", sp)
        if duck:
            names = compare.report_csvs(duck["folder"], sp["folder"])
            print(f"Spark and DuckDB: the {len(names)} CSV tables are equal", flush=True)
    if not args.keep:
        for p in (rel10, year):
            shutil.rmtree(p, ignore_errors=True)
    shutil.rmtree(reports, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
