"""The same aggregations on Apache Spark (local mode, one session for the module): every
load function over the synthetic database's release gives on Spark the rows it gives on
DuckDB. Spark needs Java 17; without it the module skips and says why."""

from __future__ import annotations

import shutil

import pytest
from test_lake import ADOPTION, export_release, some_peers

from doqscan_analysis import lake, load
from doqscan_analysis.compare import same

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs Java (17) on PATH")


@pytest.fixture(scope="module")
def release(synth_db, tmp_path_factory):
    return export_release(synth_db, str(tmp_path_factory.mktemp("release")))


@pytest.fixture(scope="module")
def duck(release):
    c = load.connect(release)
    yield c
    c.close()


@pytest.fixture(scope="module")
def spark(release):
    c = load.connect(release, engine="spark", master="local[2]")
    assert isinstance(c, lake.Lake) and c.engine == "spark"
    yield c
    c.close()


def test_every_function_same_as_duckdb(duck, spark):
    for fn, kw in ADOPTION:
        try:
            same(getattr(load, fn)(duck, **kw), getattr(load, fn)(spark, **kw),
                 sort=fn in ("scan_versions", "stack_fingerprints", "top_providers", "geo_counts", "geo_points"))
        except AssertionError as e:
            raise AssertionError(f"{fn} {kw}: {e}") from e


def test_response_times_same_as_duckdb(duck, spark):
    fd, fs = load.measurement_facts(duck), load.measurement_facts(spark)
    same(load.answering(duck, facts=fd), load.answering(spark, facts=fs))
    same(load.response_times(duck, facts=fd), load.response_times(spark, facts=fs))
    same(load.doq_causes(duck, facts=fd), load.doq_causes(spark, facts=fs))
    same(load.per_resolver_medians(duck), load.per_resolver_medians(spark))


def test_peer_response_times_same_as_duckdb(duck, spark):
    peers = some_peers(duck)
    same(load.peer_response_times(duck, peers), load.peer_response_times(spark, peers))


@pytest.mark.parametrize("groups", [[], ["tls_", "key_share"], ["vantage_id", "protocol", "address"]])
def test_order_statistics_same_as_duckdb(duck, spark, groups):
    """Spark's order statistics (each group sorted on an executor) equal DuckDB's: with
    no group, with a group column holding NULL (tls_), per resolver; for values with
    NULLs (DoUDP's handshake) and a computed ratio. No rows give no groups."""
    rel = """(SELECT *, CASE WHEN protocol IN ('doudp', 'dotcp') THEN NULL ELSE protocol END AS tls_
                FROM measurements WHERE status = 'ok')"""
    values = ["resolve_ns", "handshake_ns", "CAST(handshake_ns AS DOUBLE) / NULLIF(rtt_median_ns, 0)"]

    def ranks(n):
        return [1, (n + 1) // 2, n]
    got = lake.order_statistics_of(spark, rel, groups, values, ranks)
    assert got == lake.order_statistics_of(duck, rel, groups, values, ranks)
    assert all(len(got[v]) > 0 for v in values)
    if "tls_" in groups:
        assert any(k[0] is None for k in got["resolve_ns"]) and any(k[0] is not None for k in got["resolve_ns"])
    empty = f"(SELECT * FROM {rel} r WHERE FALSE)"
    assert lake.order_statistics_of(spark, empty, groups, values, ranks) == {v: {} for v in values}
