"""identity's loaders on Apache Spark (local mode) give the rows they give on DuckDB,
over the release of conftest.idb (rows in every table they read). A module of its own:
a Spark session's views are named after the release's tables, so one session holds one
release at a time. Spark needs Java 17; without it the module skips and says why."""

from __future__ import annotations

import shutil

import pytest
from test_lake import export_release

from doqscan_analysis import identity, lake, load
from doqscan_analysis.compare import same

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs Java (17) on PATH")

LOADERS = ["libraries_by_week", "ddr_queries", "ddr_endpoints", "policies", "cold_and_warm", "amplification"]


@pytest.fixture(scope="module")
def release(idb, tmp_path_factory):
    return export_release(idb, str(tmp_path_factory.mktemp("id-release")))


def test_identity_same_as_duckdb(release):
    duck = load.connect(release)
    try:
        want = {fn: getattr(identity, fn)(duck) for fn in LOADERS}
    finally:
        duck.close()
    spark = load.connect(release, engine="spark", master="local[2]")
    assert isinstance(spark, lake.Lake) and spark.engine == "spark"
    try:
        for fn in LOADERS:
            got = getattr(identity, fn)(spark)
            assert len(want[fn]), f"{fn}: no rows: the comparison tells nothing"
            try:
                same(want[fn], got, sort=True)
            except AssertionError as e:
                raise AssertionError(f"{fn}: {e}") from e
    finally:
        spark.close()
