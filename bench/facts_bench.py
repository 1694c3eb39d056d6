#!/usr/bin/env python3
"""Benchmark: how measurement_facts fetches the measurements its cache does not hold
(running campaigns, a read-only analyst, a database without the cache): the package's
binary COPY with a fixed-width numpy decoder and packed category codes
(facts._copy_facts), against psycopg's own rows on the same data (fetch_psycopg here: a
server-side binary cursor, one column per field, fetchmany batches into numpy).

    nice -n 10 .venv/bin/python bench/facts_bench.py [--hours 24] [--scale 12] [--repeat 3]
                                                     [--db-name NAME] [--keep]

It creates its own database on the test server (doqscan_analysis.db.server_url:
$DOQSCAN_TEST_DATABASE_URL, $DATABASE_URL or bin/dbctl url), fills it with the seeded
generator (synth; `--scale` multiplies the default population, `--hours` the hourly
campaigns of one vantage point: 24 x 12 is ~10^6 successful measurements), fills
rtt_medians (the state after campaigns finished) but not measurement_facts, and drops
it at the end unless --keep (a later run with the same --db-name reuses it).

Two measurements, each method in a fresh child process (peak RSS and CPU are the
child's, the client's; PostgreSQL's backends run the same query for both), the methods
alternating `--repeat` times (a change in the machine's load hits both alike); rows/s
from the best time:
  part   one fetch of every campaign on one connection (the function alone)
  full   load.measurement_facts(refresh=False) as the report calls it on a database
         whose cache it may not write: DOQSCAN_ANALYSIS_PARALLEL (2) connections
Both must return the same arrays (checked). The machine is shared: quote the load
average printed with the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import psycopg
from psycopg.conninfo import make_conninfo

from doqscan_analysis import db, facts, load, names, synth

METHODS = ["copy", "psycopg"]

# One row per successful measurement, a column per field (_FIELDS): the categories as
# indices into their domains (a value outside the domain gets the domain's length:
# schema.sql's CHECKs exclude that for protocol, phase and mode, an error if seen; an
# unknown key share makes measurement_facts look its name up), IPv6, campaign, address
# (high and low 64 bits; IPv4 in the low word), resolve, handshake and RTT (NULL when
# absent: NaN in the arrays), DoQ/DoH3 handshake cause (1 + index in CAUSES, 0 none).
_COLUMNS_SELECT = """
SELECT COALESCE(array_position(%(protos)s::text[], m.protocol) - 1, {np})::int2,
       COALESCE(array_position(%(phases)s::text[], m.phase) - 1, {nph})::int2,
       COALESCE(array_position(%(modes)s::text[], m.mode) - 1, {nm})::int2,
       COALESCE(array_position(%(kshares)s::text[], m.key_share) - 1, %(nks)s)::int2,
       family(m.address) = 6,
       m.campaign_id::int8,
       CASE WHEN family(m.address) = 4 THEN 0::int8 ELSE """ + facts._ADDR_HI + """ END,
       CASE WHEN family(m.address) = 4 THEN m.address - '0.0.0.0'::inet ELSE """ + facts._ADDR_LO + """ END,
       m.resolve_ns::float8, m.handshake_ns::float8, r.rtt_ns::float8, """ + facts._CAUSE_EXPR + """
  FROM measurements m
  LEFT JOIN {rtt} r ON r.campaign_id = m.campaign_id AND r.address = m.address AND r.port = m.port
       AND r.transport = """ + facts._TRANSPORT + """{rtt_on}
 WHERE m.campaign_id = ANY(%(part)s::bigint[]) AND m.status = 'ok' AND m.rcode IS NOT NULL"""
_FIELDS = [("protocol", np.int8), ("phase", np.int8), ("mode", np.int8), ("key_share", np.int16), ("v6", bool),
           ("cid", np.int64), ("hi", np.int64), ("lo", np.int64), ("resolve", np.float64),
           ("handshake", np.float64), ("rtt", np.float64), ("cause", np.int8)]
_FETCH_ROWS = 100_000  # rows a round trip of the server-side cursor, then into numpy


def columns_sql() -> str:
    """The one-column-per-field query for a part whose RTTs are cached (rtt_medians)."""
    return _COLUMNS_SELECT.format(rtt="rtt_medians", rtt_on=" AND r.campaign_id = ANY(%(part)s::bigint[])",
                                  np=len(names.PROTOCOLS), nph=len(names.PHASES), nm=len(names.MODES))


def fetch_psycopg(conn, sql: str, params: dict, cids: np.ndarray, cvant: np.ndarray) -> list[dict]:
    """Run the facts query `sql` on a server-side binary cursor (psycopg) and turn each
    batch of _FETCH_ROWS rows into compact numpy arrays (the result is never held whole)."""
    blocks = []
    with conn.transaction():
        # The planner sorted all measurements for merge joins when it underestimated the
        # RTT set; a hash join probes it in one scan. JIT buys nothing for one scan
        # (and cost 20 s of compilation in doq_causes on the 10 M bench). A cursor is
        # planned for its first rows unless told it reads them all.
        conn.execute("SET LOCAL enable_mergejoin = off")
        conn.execute("SET LOCAL jit = off")
        conn.execute("SET LOCAL work_mem = '512MB'")  # the RTT hash in one batch
        conn.execute("SET LOCAL cursor_tuple_fraction = 1")
        with conn.cursor(name="facts", binary=True) as cur:
            cur.itersize = _FETCH_ROWS
            cur.execute(sql, params)
            while rows := cur.fetchmany(_FETCH_ROWS):
                cols = list(zip(*rows))
                del rows
                b = {name: np.asarray(col, dtype=t) for (name, t), col in zip(_FIELDS, cols)}  # NULL -> NaN
                b["vantage"] = cvant[np.searchsorted(cids, b.pop("cid"))]
                for f, dom in (("protocol", names.PROTOCOLS), ("phase", names.PHASES), ("mode", names.MODES)):
                    if int(b[f].max()) >= len(dom):
                        raise RuntimeError(f"measurements.{f} outside {dom} (schema.sql's CHECK)")
                blocks.append(b)
    return blocks


def _digest(blocks: list[dict]) -> tuple[int, dict]:
    keys = ["vantage", "protocol", "phase", "mode", "key_share", "v6", "hi", "lo", "resolve", "handshake", "rtt",
            "cause"]
    cat = {k: np.concatenate([b[k] for b in blocks]) for k in keys}
    order = np.lexsort([cat[k] for k in ("lo", "hi", "key_share", "mode", "phase", "protocol", "vantage")])
    return len(order), {k: hashlib.sha256(np.nan_to_num(cat[k][order], nan=-1.0).astype(np.float64).tobytes())
                        .hexdigest() for k in keys}


def child(url: str, method: str, mode: str) -> dict:
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru0.ru_utime + ru0.ru_stime  # the imports' CPU is not the method's
    conn = load.connect(url)
    if method == "psycopg":  # psycopg's rows in the decoder's place: the same query, a column per field
        facts._copy_facts = lambda c, sql, params, cids, cvant: fetch_psycopg(c, columns_sql(), params, cids, cvant)
    t0 = time.perf_counter()
    if mode == "full":
        f = load.measurement_facts(conn, refresh=False)
        secs = time.perf_counter() - t0
        cols = {"vantage": f.vantage, "protocol": f.protocol, "phase": f.phase, "mode": f.mode,
                "key_share": f.key_share, "v6": f.addresses[f.aid, 0], "hi": f.addresses[f.aid, 1],
                "lo": f.addresses[f.aid, 2], "resolve": f.resolve, "handshake": f.handshake, "rtt": f.rtt,
                "cause": f.cause}
        rows, digest = _digest([cols])
    else:
        camps = facts._selected_campaigns(conn, None, None)
        assert all(c[2] for c in camps), "rtt_medians must be current for every campaign"
        vant_dom = sorted({c[1] for c in camps})
        cids = np.asarray([c[0] for c in camps], dtype=np.int64)
        cvant = np.asarray([vant_dom.index(c[1]) for c in camps], dtype=np.int16)
        kshares = facts._key_share_candidates(conn, [c[0] for c in camps])
        params = {"protos": list(names.PROTOCOLS), "phases": names.PHASES, "modes": names.MODES,
                  "causes": names.CAUSES, "kshares": kshares, "nks": len(kshares), "part": [c[0] for c in camps]}
        t0 = time.perf_counter()
        blocks = facts._copy_facts(conn, facts._facts_sql(True), params, cids, cvant)
        secs = time.perf_counter() - t0
        rows, digest = _digest(blocks)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"rows": rows, "seconds": secs, "peak_rss_mb": ru.ru_maxrss / 1024, "digest": digest,
            "cpu_s": ru.ru_utime + ru.ru_stime - cpu0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--scale", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", default="part,full")
    ap.add_argument("--db-name", default=f"doqscan_facts_bench_{os.getpid()}")
    ap.add_argument("--keep", action="store_true", help="keep the database; a later run with its --db-name reuses it")
    ap.add_argument("--child", choices=METHODS, help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=["part", "full"], help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.url, args.child, args.mode)))
        return 0

    server = db.server_url()
    url = make_conninfo(server, dbname=args.db_name)
    with psycopg.connect(server, autocommit=True) as c:
        exists = c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (args.db_name,)).fetchone()
        if not exists:
            c.execute(f'CREATE DATABASE "{args.db_name}"')
    ok = True
    try:
        spec = synth.default_spec(vantages=["bench-a"], hours=args.hours, key_shares=["x25519", "x25519mlkem768"])
        for p in spec.pairs:
            p.counts = [n * args.scale for n in p.counts]
            p.shift *= args.scale
        spec.doudp_counts = [n * args.scale for n in spec.doudp_counts]
        spec.doudp_shift *= args.scale
        t0 = time.monotonic()
        with psycopg.connect(url, autocommit=True) as c:
            if not exists:
                db.apply_schema(c)
                synth.generate(c, spec)
            load.refresh_rtt_medians(c)
            c.execute("DELETE FROM measurement_fact_campaigns")
            c.execute("DELETE FROM measurement_facts")
            n = c.execute("SELECT count(*) FROM measurements WHERE status = 'ok' AND rcode IS NOT NULL").fetchone()[0]
        print(f"database {args.db_name}: {n:,} successful measurements, {args.hours} campaigns "
              f"({'generated' if not exists else 'reused'} in {time.monotonic() - t0:.0f} s); rtt_medians filled, "
              "measurement_facts empty", flush=True)
        for mode in args.modes.split(","):
            res = {}
            for _ in range(args.repeat):
                for method in METHODS:
                    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", method, "--mode", mode,
                                          "--url", url], check=True, capture_output=True, text=True)
                    r = json.loads(out.stdout)
                    prev = res.get(method)
                    best = r if prev is None or r["seconds"] < prev["seconds"] else prev
                    best["peak_rss_mb"] = max(r["peak_rss_mb"], prev["peak_rss_mb"] if prev else 0)
                    res[method] = best
                    best["cpu_s"] = min(r["cpu_s"], prev["cpu_s"] if prev else r["cpu_s"])
                    print(f"    {mode} {method:8s} {r['seconds']:6.2f} s, client CPU {r['cpu_s']:5.2f} s  "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
            for method, r in res.items():
                print(f"  {mode} {method:8s} {r['rows']:>10,} rows  {r['seconds']:6.2f} s (best of {args.repeat})  "
                      f"{r['rows'] / r['seconds']:>10,.0f} rows/s  peak RSS {r['peak_rss_mb']:5.0f} MB  "
                      f"client CPU {r['cpu_s']:5.2f} s", flush=True)
            same = res["copy"]["digest"] == res["psycopg"]["digest"] and res["copy"]["rows"] == res["psycopg"]["rows"]
            ok &= same
            print(f"  {mode}: same arrays: {same}; the COPY decoder is {res['psycopg']['seconds'] / res['copy']['seconds']:.2f}x "
                  f"as fast as psycopg, peak RSS {res['copy']['peak_rss_mb'] / res['psycopg']['peak_rss_mb']:.2f}x; "
                  f"{os.cpu_count()} cores", flush=True)
        return 0 if ok else 1
    finally:
        if not args.keep:
            with psycopg.connect(server, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{args.db_name}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(main())
