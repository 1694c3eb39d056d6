"""The analysis over a data release (dataset export's Parquet files, on DuckDB) gives the
same rows as over PostgreSQL: every load function the notebooks call, on the synthetic
database exported with `bin/dataset export`."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pandas as pd
import pytest

from doqscan_analysis import lake, load

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


def same(a: pd.DataFrame, b: pd.DataFrame, sort: bool = False) -> None:
    """Equal frames: the same columns in order, the same rows; numbers compared as
    numbers (int 3 == float 3.0), floats to 1e-12 relative (sums of floats in another
    order), arrays element by element, exactly."""
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b), f"{len(a)} rows vs {len(b)}\n{a}\n{b}"
    if sort and len(a):
        keys = [c for c in a.columns if not isinstance(a[c].iloc[0], np.ndarray)]
        a, b = _sorted(a, keys), _sorted(b, keys)
    for c in a.columns:
        for i, (x, y) in enumerate(zip(a[c], b[c])):
            if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
                assert np.array_equal(np.asarray(x, float), np.asarray(y, float)), f"{c} row {i}"
            elif _missing(x) or _missing(y):
                assert _missing(x) and _missing(y), f"{c} row {i}: {x!r} vs {y!r}"
            elif isinstance(x, (int, float, np.number)) and not isinstance(x, bool):
                assert float(x) == pytest.approx(float(y), rel=1e-12, abs=1e-9), f"{c} row {i}: {x!r} vs {y!r}"
            elif _num(x) is not None and _num(y) is not None:
                assert _num(x) == pytest.approx(_num(y), rel=1e-12, abs=1e-9), f"{c} row {i}: {x!r} vs {y!r}"
            else:
                assert str(x) == str(y), f"{c} row {i}: {x!r} vs {y!r}"


def _sorted(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Rows in the order of their values (numbers as numbers): for results whose order
    among ties the SQL leaves open."""
    def key(i):
        return tuple((0, float(v), "") if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                     else (1, 0.0, str(v)) for v in (df[k].iloc[i] for k in keys))
    return df.iloc[sorted(range(len(df)), key=key)].reset_index(drop=True)


def _num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x)) or x is pd.NaT


ADOPTION = [
    ("verified_by_pair", {}), ("port_shares", {}), ("ports_not_recorded", {}), ("verified_by_family", {}),
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
    for fn in ("verified_by_pair", "port_shares", "certificate_counts", "membership_by_week", "features"):
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


def compare_report_csvs(a: str, b: str) -> list[str]:
    """Every CSV table the notebooks wrote into report folders a and b is in both and
    holds the same rows (numbers as numbers, to 1e-12 relative; rows in value order
    where the SQL leaves ties open). Returns the names compared."""
    fa = sorted(f for f in os.listdir(os.path.join(a, "figures")) if f.endswith(".csv"))
    fb = sorted(f for f in os.listdir(os.path.join(b, "figures")) if f.endswith(".csv"))
    assert fa == fb
    for f in fa:
        x = pd.read_csv(os.path.join(a, "figures", f), keep_default_na=False)
        y = pd.read_csv(os.path.join(b, "figures", f), keep_default_na=False)
        try:
            same(x, y, sort=True)
        except AssertionError as e:
            raise AssertionError(f"{f}: {e}") from e
    return fa


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
