"""The analysis over a data release (dataset export's Parquet files, on DuckDB) gives the
same rows as over PostgreSQL: every load function the notebooks call, on the synthetic
database exported with `bin/dataset export`."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from doqscan_analysis import identity, lake, load
from doqscan_analysis.compare import report_csvs as compare_report_csvs
from doqscan_analysis.compare import same

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def export_release(db_url: str, out: str) -> str:
    """`bin/dataset export` of the database at db_url into out (building bin/dataset)."""
    subprocess.run(["go", "build", "-o", "bin/", "./cmd/dataset"], cwd=ROOT, check=True,
                   env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/local/go/bin"})
    subprocess.run([os.path.join(ROOT, "bin", "dataset"), "export", "--log-level", "warn", out], check=True,
                   env={**os.environ, "DATABASE_URL": db_url}, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="module")
def release(synth_db, tmp_path_factory):
    return export_release(synth_db, str(tmp_path_factory.mktemp("release")))


@pytest.fixture(scope="module")
def pg(synth_db):
    c = load.connect(synth_db)
    yield c
    c.close()


@pytest.fixture(scope="module")
def lk(release):
    c = load.connect(release)
    assert isinstance(c, lake.Lake)
    yield c
    c.close()


ADOPTION = [
    ("verified_by_pair", {}), ("verification_outcomes", {}), ("port_shares", {}), ("ports_not_recorded", {}),
    ("verified_by_family", {}),
    ("scan_versions", {}), ("stack_fingerprints", {}), ("certificate_counts", {}), ("top_providers", {"top": 3}),
    ("membership_by_week", {"kind": "doq"}), ("membership_by_week", {"kind": "doudp"}),
    ("geo_counts", {"by": "continent"}), ("geo_counts", {"by": "country"}), ("geo_counts", {"by": "asn"}),
    ("geo_points", {}), ("vantage_points", {}), ("features", {}), ("sources", {}), ("provenance", {}),
    ("bench_runs", {}),
]


@pytest.mark.parametrize("fn,kw", ADOPTION, ids=[f"{f}-{'-'.join(map(str, k.values()))}" for f, k in ADOPTION])
def test_same_as_postgres(pg, lk, fn, kw):
    a = getattr(load, fn)(pg, **kw)
    b = getattr(load, fn)(lk, **kw)
    same(a, b, sort=fn in ("scan_versions", "stack_fingerprints", "top_providers", "geo_counts", "geo_points"))


def test_filters_same_as_postgres(pg, lk, spec):
    w = spec.weeks[1:3]
    for fn in ("verified_by_pair", "verification_outcomes", "port_shares", "certificate_counts", "membership_by_week",
               "features"):
        same(getattr(load, fn)(pg, weeks=w, vantages=["synth-a"]), getattr(load, fn)(lk, weeks=w, vantages=["synth-a"]))
    same(load.geo_counts(pg, "country", week=spec.weeks[2]), load.geo_counts(lk, "country", week=spec.weeks[2]), sort=True)


def test_response_times_same_as_postgres(pg, lk):
    fp, fl = load.measurement_facts(pg), load.measurement_facts(lk)
    same(load.answering(pg, facts=fp), load.answering(lk, facts=fl))
    same(load.response_times(pg, facts=fp), load.response_times(lk, facts=fl))
    same(load.response_times(pg, facts=fp, group_by=("protocol",), dox_only=True, points=7),
         load.response_times(lk, facts=fl, group_by=("protocol",), dox_only=True, points=7))
    addr = "198.18.0.3"
    same(load.response_times(pg, facts=fp, addresses=[addr]), load.response_times(lk, facts=fl, addresses=[addr]))
    same(load.doq_causes(pg, facts=fp), load.doq_causes(lk, facts=fl))
    same(load.per_resolver_medians(pg), load.per_resolver_medians(lk))


def some_peers(conn) -> pd.DataFrame:
    """Four measured addresses as testbed peers, out of address order, and one never
    measured (peer_response_times leaves it out)."""
    addrs = sorted(load.per_resolver_medians(conn)["address"].unique())
    picked = [addrs[-1], addrs[0], "192.0.2.99", addrs[len(addrs) // 2], addrs[1]]
    return pd.DataFrame({"address": picked, "peer": "coredns", "class": "peer-x"})


def test_peer_response_times_same_as_postgres(pg, lk):
    """One pass over every peer on a release: the rows of one response_times per peer."""
    peers = some_peers(pg)
    got = load.peer_response_times(lk, peers)
    same(load.peer_response_times(pg, peers), got)
    assert list(dict.fromkeys(got["address"])) == [a for a in peers["address"] if a != "192.0.2.99"]


def test_order_statistics_exact(lk):
    """The two-pass search returns the same order statistics as sorting every value."""
    rel = "(SELECT * FROM measurements WHERE status = 'ok')"
    vals = np.sort(lk.sql(f"SELECT CAST(resolve_ns AS DOUBLE) AS x FROM {rel} r")["x"].to_numpy())
    n = len(vals)
    ranks = [1, 2, n // 3, n // 2, n - 1, n]
    got = lake.order_statistics(lk, rel, [], "resolve_ns", lambda m: ranks)
    (m, byrank), = got.values()
    assert m == n
    assert [byrank[r] for r in ranks] == [vals[r - 1] for r in ranks]


@pytest.mark.parametrize("values", ["small ints", "ints past the packed bits", "negative ints", "floats"])
@pytest.mark.parametrize("codes", [1, 3, 40, 70000])
def test_split_sorted_is_a_sort_per_code(values, codes):
    """Every path of the local split (one part, few codes, many codes packed with the
    value into one integer, and the argsort for what does not pack) gives each code's
    values sorted."""
    rng = np.random.default_rng(7)
    n = 200_000
    xs = {"small ints": rng.integers(0, 10**10, n), "ints past the packed bits": rng.integers(0, 2**62, n),
          "negative ints": rng.integers(-10**6, 10**6, n), "floats": rng.lognormal(3, 2, n)}[values]
    c = None if codes == 1 else rng.integers(0, codes, n)
    uniq = [()] if codes == 1 else [(f"a{i}",) for i in range(codes)]
    got = dict(lake._split_sorted(c, uniq, xs.copy()))
    want = {(): np.sort(xs)} if c is None else {uniq[i]: np.sort(xs[c == i]) for i in np.unique(c)}
    assert got.keys() == want.keys()
    for k in want:
        assert np.array_equal(got[k], want[k]), k


def test_part_figures_keep_half_nanoseconds():
    """The paired RTT is an interpolated median (halves): its sum is a float sum, the
    integer metrics' an exact one."""
    import pyarrow as pa
    tbl = pa.table({"x0_": pa.array([1, 2, 2**62], pa.int64()), "x1_": pa.array([0.5, 1.0, None]),
                    "x2_": pa.array([3, None, 4], pa.int64()), "x3_": pa.array([1.4, 2.6, 0.2])})
    got = {}
    for i in range(len(lake.METRICS)):
        for _, fig, _ in lake._part_figures(tbl, i, [((), None)], {()}, lambda n: [1]):
            got |= fig
    assert got["resolve_ns_sum"] == 3 + 2**62 and got["rtt_ns_sum"] == 1.5 and got["handshake_ns_sum"] == 7
    assert got["rtt_ns_n"] == 2 and got["handshake_ns_n"] == 2
    assert [got[f"round_trips_{k}"] for k in range(1, 6)] == [2, 0, 1, 0, 0]


def test_exact_sum_past_int64():
    xs = np.full(10, 2**62, dtype=np.int64)
    assert lake._exact_sum(xs) == 10 * 2**62
    assert lake._exact_sum(np.array([-5, 3, 2**40], dtype=np.int64)) == 2**40 - 2
    assert lake._exact_sum(np.array([], dtype=np.int64)) == 0


def test_report_from_release_equals_postgres(synth_db, release, tmp_path):
    """The whole report from the release (DuckDB) writes the same CSV tables as from
    PostgreSQL: every figure's numbers."""
    from doqscan_analysis import report
    a = report.run(synth_db, str(tmp_path / "pg"))
    b = report.run(release, str(tmp_path / "lake"))
    assert a["ok"] and b["ok"], (a["notebooks"], b["notebooks"])
    assert b["source"] == "release" and b["engine"] == "duckdb"
    names = compare_report_csvs(a["folder"], b["folder"])
    for want in ("fig1_doq_quic_versions_per_week.csv", "response_times_quantiles.csv", "doq_causes.csv",
                 "vantage_comparison.csv", "fig2_world_map.csv", "answering.csv"):
        assert want in names


# identity's loaders and what the notebooks derive from them, over conftest.idb (rows in
# every table identity reads) and its release.
IDENTITY = ["libraries_by_week", "ddr_queries", "ddr_endpoints", "policies", "cold_and_warm", "amplification"]
IDENTITY_TABLES = ["quic_stacks", "ddr_queries", "ddr_designations", "policy_runs", "connection_policies",
                   "amplification_probes"]


@pytest.fixture(scope="module")
def id_release(idb, tmp_path_factory):
    return export_release(idb, str(tmp_path_factory.mktemp("id-release")))


@pytest.fixture(scope="module")
def id_pg(idb):
    c = load.connect(idb)
    yield c
    c.close()


def _identity_frames(conn, weeks=None, vantages=None) -> dict:
    out = {fn: getattr(identity, fn)(conn, weeks, vantages) for fn in IDENTITY}
    out["ddr_table"] = identity.ddr_table(out["ddr_endpoints"])
    out["policy_table"] = identity.policy_table(out["policies"])
    out["forwarder_cost"] = identity.forwarder_cost(out["policies"], out["cold_and_warm"])
    out["amplification_cells"] = identity.amplification_cells(out["amplification"])
    return out


@pytest.mark.parametrize("filters", [(None, None), (["2026-W48"], ["vp"]), (["2026-W01"], None)],
                         ids=["all", "week-and-vantage", "no-such-week"])
def test_identity_same_as_postgres(id_pg, id_release, filters):
    """Every identity loader (and the tables the notebooks derive) gives from the
    release the rows it gives from PostgreSQL; with rows in every table read."""
    lk = load.connect(id_release)
    try:
        a, b = _identity_frames(id_pg, *filters), _identity_frames(lk, *filters)
    finally:
        lk.close()
    for name in a:
        if filters[0] != ["2026-W01"]:
            assert len(a[name]), f"{name}: no rows from PostgreSQL: the comparison tells nothing"
        try:
            same(a[name], b[name], sort=True)
        except AssertionError as e:
            raise AssertionError(f"{name} {filters}: {e}") from e


def test_identity_from_a_release_without_its_tables(id_pg, id_release, tmp_path):
    """A release written before those tables (schema version 1, the 2021 import) gives
    empty frames with the columns PostgreSQL's have, not an error; resolvers count as
    not identified."""
    old = str(tmp_path / "v1")
    shutil.copytree(id_release, old)
    for t in IDENTITY_TABLES:
        for f in glob.glob(os.path.join(old, "*", "*", t + ".parquet")):
            os.remove(f)
    lk = load.connect(old)
    try:
        b = _identity_frames(lk)
    finally:
        lk.close()
    a = _identity_frames(id_pg)
    for name in ("ddr_queries", "ddr_endpoints", "policies", "amplification", "ddr_table", "amplification_cells"):
        assert list(b[name].columns) == list(a[name].columns), name
        assert b[name].empty, name
    assert b["policy_table"].empty and b["forwarder_cost"].empty
    libs = b["libraries_by_week"]
    assert list(libs.columns) == list(a["libraries_by_week"].columns)
    assert set(libs["library"]) == {identity.NOT_IDENTIFIED}
    assert libs["resolvers"].sum() == a["libraries_by_week"]["resolvers"].sum()
    same(a["cold_and_warm"], b["cold_and_warm"], sort=True)


def test_synthetic_year_keeps_identity_tables(id_release, tmp_path):
    """synth.write_year repeats the template's identity tables in every week it writes
    (each week's file: the template week's rows)."""
    import json

    from doqscan_analysis import synth
    totals = synth.write_year(id_release, str(tmp_path / "year"), weeks=2, hours_per_week=2)
    with open(os.path.join(id_release, "manifest.json")) as f:
        m = json.load(f)
    rows = {t: sum(x["rows"] for s in m["file_sets"] for x in s["files"] if x["table"] == t) for t in IDENTITY_TABLES}
    assert all(rows.values()), rows
    assert {t: totals.get(t) for t in IDENTITY_TABLES} == {t: 2 * n for t, n in rows.items()}


def test_synthetic_year_ids_unique(release, tmp_path):
    """Every measurement synth.write_year writes has an id of its own across the weeks,
    and each handshake analysis references exactly one, as in an export
    (measurement_id is unique in a release)."""
    from doqscan_analysis import synth
    year = str(tmp_path / "year")
    totals = synth.write_year(release, year, weeks=2, hours_per_week=2)
    c = load.connect(year)
    try:
        ids = c.sql("SELECT count(*) AS n, count(DISTINCT measurement_id) AS d FROM measurements")
        assert ids["n"].iloc[0] == ids["d"].iloc[0] == totals["measurements"]
        joined = c.sql("""SELECT count(*) AS n FROM handshake_analyses h
                            JOIN measurements m ON m.measurement_id = h.measurement_id""")["n"].iloc[0]
        assert totals["handshake_analyses"] > 0 and joined == totals["handshake_analyses"]
    finally:
        c.close()


def test_facts_cache_built_once_and_rebuilt_when_stale(release, tmp_path, monkeypatch):
    """The facts cache holds every successful measurement of each file set, is written
    once, and is written again when its source files change (their SHA-256 in the
    manifest, recorded in the stamp beside it)."""
    monkeypatch.setenv("DOQSCAN_LAKE_CACHE", str(tmp_path))
    c = load.connect(release)
    try:
        files = lake.facts_files(c)
        assert files and all(f.startswith(str(tmp_path)) for f in files)
        lst = "[" + ", ".join(f"'{f}'" for f in files) + "]"
        got = c.sql(f"SELECT count(*) AS n FROM read_parquet({lst})")["n"].iloc[0]
        want = c.sql("SELECT count(*) AS n FROM measurements WHERE status = 'ok' AND rcode IS NOT NULL")["n"].iloc[0]
        assert got == want
        before = {f: os.stat(f).st_mtime_ns for f in files}
        assert lake.facts_files(c) == files
        assert {f: os.stat(f).st_mtime_ns for f in files} == before
        stamp = files[0][:-len(".parquet")] + ".json"
        with open(stamp, "w") as fh:
            fh.write('{"version": 1, "measurements": "an older file"}')
        lake.facts_files(c)
        assert os.stat(files[0]).st_mtime_ns != before[files[0]]
        assert [os.stat(f).st_mtime_ns for f in files[1:]] == [before[f] for f in files[1:]]
    finally:
        c.close()


def test_duckdb_spills_outside_working_directory(release):
    """DuckDB's spill files go to a directory of the Lake (removed on close), not .tmp/
    in the working directory (the notebooks run in notebooks/ of the source tree)."""
    c = load.connect(release)
    spill = c.sql("SELECT current_setting('temp_directory') AS d")["d"].iloc[0]
    assert os.path.isabs(spill) and not spill.startswith(os.getcwd() + os.sep)
    assert os.path.isdir(spill)
    c.close()
    assert not os.path.exists(spill)
