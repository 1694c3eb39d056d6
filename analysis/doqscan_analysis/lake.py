"""The analysis over a data release (`dataset export`'s Parquet files, docs/data-release.md)
instead of PostgreSQL: the same functions as `load`, the same rows back, with every
aggregation in SQL on DuckDB (default) or Apache Spark (`engine="spark"`, local mode or a
cluster's master URL). Nothing loads a release's rows into pandas: counts and sums are
SQL, and distributions are exact order statistics of each group's values sorted whole,
one group at a time (in this process on DuckDB, on the executors on Spark), so memory
grows with the largest group, not with the number of rows.

`load.connect(path)` returns a Lake for a directory; every `load` function given a Lake
runs the function of the same name here. The SQL is one text for both engines where the
dialects allow; the few differences (list functions, lambdas, explode) are methods of
Lake.
"""

from __future__ import annotations

import glob
import json
import math
import os
import sys
from collections.abc import Sequence

import numpy as np
import pandas as pd

from . import names
from .names import DEFAULT_POINTS, GROUP_COLUMNS, METRICS, ROUND_TRIP_CLASSES

PORT_UNKNOWN = 0
DOUDP_RCODES = [0, 3]
CAUSES = names.CAUSES

# Every table a release holds (docs/data-release.md); release-wide ones at the top.
TABLES = ["scans", "scan_runs", "scan_replies", "verification_runs", "verification_results", "quic_stacks",
          "ddr_queries", "ddr_designations", "certificates", "observed_certificates", "resolvers", "resolver_geo",
          "policy_runs", "connection_policies", "amplification_probes", "campaigns", "measurements", "rtt_samples",
          "handshake_analyses", "resolver_features", "bench_runs", "bench_samples"]
GLOBAL_TABLES = ["vantage_points", "datasets"]
# The JVM heap of a local Spark session (DOQSCAN_SPARK_MEMORY overrides it).
DEFAULT_SPARK_MEMORY = "2g"


def is_release(path) -> bool:
    """Whether path is a release directory (it holds manifest.json)."""
    return isinstance(path, (str, os.PathLike)) and os.path.isfile(os.path.join(path, "manifest.json"))


class Lake:
    """A release directory as SQL views named after its tables, on DuckDB or Spark."""

    def __init__(self, path: str, engine: str = "duckdb", master: str | None = None,
                 memory_limit: str | None = None, threads: int | None = None):
        self.path = os.path.abspath(path)
        with open(os.path.join(self.path, "manifest.json")) as f:
            self.manifest = json.load(f)
        if self.manifest.get("format") != "doqscan-release":
            raise ValueError(f"{path}: not a doqscan release (manifest format {self.manifest.get('format')!r})")
        self.engine = engine
        self.tables = set()
        if engine == "duckdb":
            import duckdb
            # A kernel's DuckDB holds at most this much (it spills past it): the report runs
            # three notebooks at once within the 4 GB goal.
            cfg = {"memory_limit": memory_limit or os.environ.get("DOQSCAN_DUCKDB_MEMORY", "1GB")}
            if threads:
                cfg["threads"] = threads
            # spills go to a directory of this process, not .tmp/ in the working directory
            # (the notebooks': the source tree)
            import tempfile
            self._spill = tempfile.mkdtemp(prefix="doqscan-duckdb-")
            cfg["temp_directory"] = self._spill
            import atexit
            import shutil
            atexit.register(shutil.rmtree, self._spill, True)  # notebooks never close their Lake
            self.db = duckdb.connect(config=cfg)
            self.db.execute("SET preserve_insertion_order = false")
            self.db.execute("SET parquet_metadata_cache = true")
            try:
                self.db.execute("SET enable_progress_bar = false")
            except duckdb.Error:
                pass  # in a Jupyter kernel DuckDB changes it only with ipywidgets installed; no bar there
        elif engine == "spark":
            from pyspark.sql import SparkSession
            m = master or os.environ.get("SPARK_MASTER", "local[2]")
            b = SparkSession.builder.appName("doqscan-report").master(m)
            b = b.config("spark.sql.session.timeZone", "UTC").config("spark.sql.execution.arrow.pyspark.enabled", "true")
            # local[N]: N shuffle partitions (the default 200 tasks per shuffle dominate small queries)
            parts = m[6:-1] if m.startswith("local[") and m[6:-1].isdigit() else "16"
            b = b.config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", parts)
            if m.startswith("local"):
                # local mode runs the executors in the driver's JVM: its heap is every
                # task's. The Python workers (order statistics) need this interpreter's
                # numpy and pyarrow (pyspark reads the variable when the context starts);
                # on a cluster, PYSPARK_PYTHON names the executors' Python.
                memory_limit = memory_limit or os.environ.get("DOQSCAN_SPARK_MEMORY", DEFAULT_SPARK_MEMORY)
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            if memory_limit:
                b = b.config("spark.driver.memory", memory_limit)
            self.spark = b.getOrCreate()
        else:
            raise ValueError(f"engine {engine!r}: want duckdb or spark")
        for t in GLOBAL_TABLES + TABLES:
            files = self._files(t)
            if files:
                self._view(t, files)
                self.tables.add(t)

    def _files(self, table: str) -> list[str]:
        if table in GLOBAL_TABLES:
            p = os.path.join(self.path, table + ".parquet")
            return [p] if os.path.exists(p) else []
        return sorted(glob.glob(os.path.join(self.path, "*", "*", table + ".parquet")))

    def _view(self, name: str, files: list[str]) -> None:
        if self.engine == "duckdb":
            lst = "[" + ", ".join(_lit(f) for f in files) + "]"
            self.db.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet({lst}, union_by_name = true)")
        else:
            self.spark.read.parquet(*files).createOrReplaceTempView(name)

    def has(self, table: str) -> bool:
        return table in self.tables

    def sql(self, query: str) -> pd.DataFrame:
        """Run a query whose result is small (aggregates) and return it as a DataFrame."""
        if self.engine == "duckdb":
            return self.db.execute(query).df()
        return self.spark.sql(query).toPandas()

    def materialize(self, name: str, query: str) -> None:
        """A small intermediate result (the DoX set) computed once."""
        if self.engine == "duckdb":
            self.db.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {query}")
        else:
            df = self.spark.sql(query).cache()
            df.count()
            df.createOrReplaceTempView(name)

    def close(self) -> None:
        if self.engine == "duckdb":
            import shutil
            self.db.close()
            shutil.rmtree(self._spill, ignore_errors=True)
        else:
            self.spark.stop()

    # Dialect: the few spellings DuckDB and Spark SQL do not share.
    def first(self, col: str) -> str:
        return f"{col}[1]" if self.engine == "duckdb" else f"element_at({col}, 1)"

    def exact_sum(self, col: str) -> str:
        """The exact sum of an integer column as text (DuckDB sums BIGINT into HUGEINT;
        Spark's BIGINT sum would overflow, so it sums DECIMAL(38, 0))."""
        if self.engine == "duckdb":
            return f"CAST(sum({col}) AS STRING)"
        return f"CAST(sum(CAST({col} AS DECIMAL(38, 0))) AS STRING)"

    def size(self, col: str) -> str:
        return f"len({col})" if self.engine == "duckdb" else f"size({col})"

    def fingerprint(self, col: str) -> str:
        """The advertised version list as text, grease values as 'grease' (census._FINGERPRINT_SQL)."""
        body = "CASE WHEN (v & 252645135) = 168430090 THEN 'grease' ELSE CAST(v AS STRING) END"
        if self.engine == "duckdb":
            s = f"array_to_string(list_transform({col}, lambda v: {body}), ',')"
        else:
            s = f"array_join(transform({col}, v -> {body}), ',')"
        return f"(CASE WHEN {col} IS NULL OR {self.size(col)} = 0 THEN NULL ELSE {s} END)"

    def explode(self, rel: str, col: str, alias: str) -> str:
        """FROM-clause text: each row of rel once per element of its list col, as alias."""
        if self.engine == "duckdb":
            return f"(SELECT *, unnest({col}) AS {alias} FROM {rel})"
        return f"(SELECT *, explode({col}) AS {alias} FROM {rel})"


def _lit(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, float):
        return repr(v)
    return "'" + str(v).replace("'", "''") + "'"


def _in(col: str, values) -> str:
    """SQL condition col IN values; TRUE for None (no filter)."""
    if values is None:
        return "TRUE"
    values = list(values)
    if not values:
        return "FALSE"
    return f"{col} IN ({', '.join(_lit(v) for v in values)})"


def _rint(x: str) -> str:
    """Round half to even (numpy's rint, PostgreSQL's round(float8))."""
    return (f"(CASE WHEN {x} - floor({x}) = 0.5 THEN floor({x}) + CASE WHEN CAST(floor({x}) AS BIGINT) % 2 = 0 "
            f"THEN 0 ELSE 1 END ELSE floor({x} + 0.5) END)")


_PORT_ORDER = names.sql_port_rank("port")


def _verified(weeks, vantages) -> str:
    """The verified and rep CTEs of census._VERIFIED_CTE (rep: one row per week and
    resolver, its preferred port deciding the pair)."""
    return f"""
verified AS (
    SELECT vr.iso_week, vr.vantage_id, vr.run_id, vr.scan_id, vr.city_dataset, vr.asn_dataset,
           r.address, r.port, r.alpn, r.quic_version, r.cert_chain, r.scan_versions
      FROM verification_results r JOIN verification_runs vr ON vr.run_id = r.run_id
     WHERE r.outcome = 'doq-verified' AND {_in('vr.iso_week', weeks)} AND {_in('vr.vantage_id', vantages)}),
rep AS (
    SELECT * FROM (SELECT v.*, row_number() OVER (PARTITION BY iso_week, address
                          ORDER BY {_PORT_ORDER}, port, vantage_id) AS rn_ FROM verified v) x WHERE rn_ = 1)"""


def _ints(df: pd.DataFrame, cols) -> pd.DataFrame:
    for c in cols:
        if c in df:
            df[c] = df[c].fillna(0).astype("int64")
    return df


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """Nullable columns as a PostgreSQL query's frame has them (DuckDB gives pandas'
    extension types): integers with a null as float64 (NaN), booleans with a null as
    objects (None), both as numpy types without one."""
    for c in df.columns:
        t = df[c].dtype
        if isinstance(t, pd.BooleanDtype):
            df[c] = df[c].astype(object).where(df[c].notna(), None) if df[c].isna().any() else df[c].astype(bool)
        elif isinstance(t, pd.api.extensions.ExtensionDtype) and pd.api.types.is_integer_dtype(t):
            df[c] = df[c].astype("float64") if df[c].isna().any() else df[c].astype("int64")
    return df


def _fp_label(fp) -> str:
    from .census import _fp_label as f
    return f(fp)


# ----------------------------------------------------------------------------------
# Scans, verification, locations (the adoption notebook).

def weeks(lake: Lake, vantages=None) -> list[str]:
    parts = []
    if lake.has("verification_runs"):
        parts.append(f"SELECT iso_week FROM verification_runs WHERE {_in('vantage_id', vantages)}")
    if lake.has("campaigns"):
        parts.append(f"SELECT iso_week FROM campaigns WHERE {_in('vantage_id', vantages)}")
    if not parts:
        return []
    return lake.sql(" UNION ".join(parts) + " ORDER BY 1")["iso_week"].tolist()


def vantage_points(lake: Lake) -> pd.DataFrame:
    from .catalog import VANTAGE_COLUMNS
    df = lake.sql("SELECT * FROM vantage_points ORDER BY vantage_id")
    return df.reindex(columns=VANTAGE_COLUMNS).assign(location=lambda d: d["location"].fillna(""))


def datasets(lake: Lake) -> pd.DataFrame:
    return lake.sql("""SELECT dataset_id, kind, database_type, build_time, sha256, path, vantage_id, label, source
                         FROM datasets ORDER BY kind, build_time""")


def provenance(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    from .catalog import PROVENANCE_COLUMNS
    queries = {"scans": """SELECT 'scan' AS stage, scan_id AS run,
                                  iso_week || CASE WHEN shards > 1 THEN ' shard ' || CAST(shard AS STRING) ELSE '' END AS key,
                                  iso_week AS week, vantage_id, label, provenance FROM scans""",
               "verification_runs": """SELECT 'verify' AS stage, run_id AS run, iso_week AS key, iso_week AS week,
                                              vantage_id, label, provenance FROM verification_runs""",
               "campaigns": """SELECT 'measure' AS stage, campaign_id AS run, round_hour AS key, iso_week AS week,
                                      vantage_id, label, provenance FROM campaigns"""}
    frames = []
    for t, q in queries.items():
        if lake.has(t):
            d = lake.sql(f"SELECT * FROM ({q}) r WHERE {_in('week', weeks)} AND {_in('vantage_id', vantages)}")
            if t == "campaigns":  # the round hour in UTC, as load.provenance writes it
                d["key"] = [pd.Timestamp(k).tz_convert("UTC").strftime("%Y-%m-%dT%HZ") if pd.Timestamp(k).tzinfo
                            else pd.Timestamp(k).strftime("%Y-%m-%dT%HZ") for k in d["key"]]
            frames.append(d)
    raw = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if raw.empty:
        return pd.DataFrame(columns=PROVENANCE_COLUMNS)
    rows = []
    for r in raw.itertuples(index=False):
        recs = json.loads(r.provenance) if isinstance(r.provenance, str) and r.provenance else []
        p = recs[-1] if recs else {}
        key = r.key
        b = p.get("build") or {}
        v = p.get("vantage") or {}
        z = p.get("zmap") or {}
        rows.append({
            "stage": r.stage, "run": int(r.run), "key": key, "vantage_id": r.vantage_id, "label": r.label,
            "tool": p.get("tool") or "", "version": b.get("version") or "", "revision": (b.get("revision") or "")[:12],
            "modified": bool(b.get("modified") or False), "host": p.get("host") or "",
            "location": v.get("location") or "", "contact": v.get("contact") or "", "zmap": z.get("version") or "",
            "probes": ", ".join(f"{e.get('kind')} {(e.get('sha256') or '')[:12]}" for e in (p.get("probes") or [])),
            "geoip": ", ".join(f"{e.get('kind')} {(e.get('build_time') or '')[:10]}" for e in (p.get("geoip") or [])),
            "records": len(recs)})
    df = pd.DataFrame(rows)
    df["_s"] = df["stage"].map({"scan": 0, "verify": 1, "measure": 2})
    df = df.sort_values(["key", "_s", "vantage_id", "label", "run"], kind="stable").reset_index(drop=True)
    return df[PROVENANCE_COLUMNS]


def sources(lake: Lake, vantages=None) -> pd.DataFrame:
    cols = ["vantage_id", "label", "weeks", "first_week", "last_week", "verified_per_week", "campaigns", "measurements",
            "imported_from"]
    vv = lake.sql(f"""
        WITH v AS (SELECT vr.vantage_id, vr.label, vr.iso_week, vr.run_id,
                          (SELECT count(DISTINCT r.address) FROM verification_results r
                            WHERE r.run_id = vr.run_id AND r.outcome = 'doq-verified') AS verified
                     FROM verification_runs vr WHERE {_in('vr.vantage_id', vantages)})
        SELECT vantage_id, label, count(*) AS weeks, min(iso_week) AS first_week, max(iso_week) AS last_week,
               avg(verified) AS verified_per_week FROM v GROUP BY 1, 2""") if lake.has("verification_runs") else \
        pd.DataFrame(columns=["vantage_id", "label", "weeks", "first_week", "last_week", "verified_per_week"])
    cc = lake.sql(f"""
        SELECT c.vantage_id, c.label, count(*) AS campaigns, sum(coalesce(m.n, 0)) AS measurements
          FROM campaigns c LEFT JOIN (SELECT campaign_id, count(*) AS n FROM measurements GROUP BY 1) m
            ON m.campaign_id = c.campaign_id
         WHERE {_in('c.vantage_id', vantages)} GROUP BY 1, 2""") if lake.has("campaigns") else \
        pd.DataFrame(columns=["vantage_id", "label", "campaigns", "measurements"])
    ds = lake.sql("""SELECT vantage_id, label, source AS imported_from FROM (
                       SELECT vantage_id, label, source, row_number() OVER (PARTITION BY vantage_id, label ORDER BY dataset_id DESC) AS rn
                         FROM datasets WHERE kind = 'import') x WHERE rn = 1""")
    df = vv.merge(cc, on=["vantage_id", "label"], how="outer").merge(ds, on=["vantage_id", "label"], how="left")
    df = _ints(df, ["weeks", "campaigns", "measurements"])
    df["verified_per_week"] = [None if pd.isna(x) else float(round(float(x), 1)) for x in df["verified_per_week"]]
    df["imported_from"] = df["imported_from"].where(df["imported_from"].notna(), None)
    return df.sort_values(["vantage_id", "label"], kind="stable").reset_index(drop=True)[cols]


def verification_outcomes(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    cols = ["iso_week", "outcome", "endpoints", "addresses"]
    if not lake.has("verification_results"):
        return pd.DataFrame(columns=cols)
    df = lake.sql(f"""
        SELECT vr.iso_week, r.outcome, count(*) AS endpoints, count(DISTINCT r.address) AS addresses
          FROM verification_results r JOIN verification_runs vr ON vr.run_id = r.run_id
         WHERE {_in('vr.iso_week', weeks)} AND {_in('vr.vantage_id', vantages)}
         GROUP BY 1, 2 ORDER BY 1, 2""")
    return _ints(df, ["endpoints", "addresses"])[cols]


def verified_by_pair(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    df = lake.sql("WITH " + _verified(weeks, vantages) + """
        SELECT iso_week, alpn, quic_version, count(*) AS resolvers FROM rep GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""")
    df = _ints(df, ["resolvers"])
    df["pair"] = [names.pair_name(a, v) for a, v in zip(df["alpn"], df["quic_version"])]
    return df


def verified_by_family(lake: Lake, weeks=None, vantages=None, siblings=None) -> pd.DataFrame:
    from .census import _sibling_pairs
    pairs = _sibling_pairs(siblings)
    decl = (" UNION ALL ".join(f"SELECT {_lit(a)} AS address4, {_lit(b)} AS address6" for a, b in pairs)
            if pairs else "SELECT CAST(NULL AS STRING) AS address4, CAST(NULL AS STRING) AS address6 WHERE FALSE")
    v6 = "(address LIKE '%:%')"
    df = lake.sql("WITH " + _verified(weeks, vantages) + f""",
        leaf AS (SELECT DISTINCT iso_week, address, {lake.first('cert_chain')} AS leaf FROM verified),
        fam AS (SELECT iso_week, count(DISTINCT CASE WHEN NOT {v6} THEN address END) AS ipv4,
                       count(DISTINCT CASE WHEN {v6} THEN address END) AS ipv6 FROM verified GROUP BY 1),
        declared AS ({decl}),
        merged AS (SELECT DISTINCT l4.iso_week, d.address4, d.address6
                     FROM declared d JOIN leaf l4 ON l4.address = d.address4
                     JOIN leaf l6 ON l6.address = d.address6 AND l6.iso_week = l4.iso_week
                    WHERE l4.leaf = l6.leaf),
        dual AS (SELECT iso_week, count(*) AS dual_stack FROM merged GROUP BY 1),
        unpaired AS (SELECT l6.iso_week, count(DISTINCT l6.address) AS shared_cert_unpaired
                       FROM leaf l6 JOIN leaf l4 ON l4.iso_week = l6.iso_week AND l4.leaf = l6.leaf
                       LEFT JOIN merged m ON m.iso_week = l6.iso_week AND m.address6 = l6.address
                      WHERE l6.address LIKE '%:%' AND NOT (l4.address LIKE '%:%') AND m.address6 IS NULL
                      GROUP BY 1)
        SELECT f.iso_week, f.ipv4, f.ipv6, coalesce(d.dual_stack, 0) AS dual_stack,
               f.ipv4 + f.ipv6 - coalesce(d.dual_stack, 0) AS resolvers,
               coalesce(u.shared_cert_unpaired, 0) AS shared_cert_unpaired
          FROM fam f LEFT JOIN dual d ON d.iso_week = f.iso_week LEFT JOIN unpaired u ON u.iso_week = f.iso_week
         ORDER BY 1""")
    return _ints(df, ["ipv4", "ipv6", "dual_stack", "resolvers", "shared_cert_unpaired"])


def port_shares(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    df = lake.sql("WITH " + _verified(weeks, vantages) + f""",
        per_port AS (SELECT iso_week, port, count(DISTINCT address) AS resolvers FROM verified
                      WHERE port <> {PORT_UNKNOWN} GROUP BY 1, 2),
        total AS (SELECT iso_week, count(*) AS total FROM rep GROUP BY 1)
        SELECT p.iso_week, p.port, p.resolvers, t.total FROM per_port p JOIN total t ON t.iso_week = p.iso_week
         ORDER BY 1, 2""")
    df = _ints(df, ["port", "resolvers", "total"])
    df["share"] = df["resolvers"] / df["total"]
    return df


def ports_not_recorded(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    df = lake.sql("WITH " + _verified(weeks, vantages) + f""",
        total AS (SELECT iso_week, count(*) AS total FROM rep GROUP BY 1),
        unk AS (SELECT iso_week, address FROM verified GROUP BY 1, 2 HAVING bool_and(port = {PORT_UNKNOWN})),
        us AS (SELECT DISTINCT u.iso_week, u.address, v.scan_id FROM unk u
                 JOIN verified v ON v.iso_week = u.iso_week AND v.address = u.address),
        sp AS (SELECT u.iso_week, u.address, bool_or(s.port = 784) AS a, bool_or(s.port = 8853) AS b
                 FROM us u LEFT JOIN scan_replies s ON s.scan_id = u.scan_id AND s.address = u.address
                GROUP BY 1, 2)
        SELECT sp.iso_week, t.total, count(*) AS not_recorded,
               sum(CASE WHEN a AND NOT b THEN 1 ELSE 0 END) AS scan_784_only,
               sum(CASE WHEN b AND NOT a THEN 1 ELSE 0 END) AS scan_8853_only,
               sum(CASE WHEN a AND b THEN 1 ELSE 0 END) AS scan_both,
               sum(CASE WHEN coalesce(a, FALSE) = FALSE AND coalesce(b, FALSE) = FALSE THEN 1 ELSE 0 END) AS scan_neither
          FROM sp JOIN total t ON t.iso_week = sp.iso_week GROUP BY 1, 2 ORDER BY 1""")
    return _ints(df, ["total", "not_recorded", "scan_784_only", "scan_8853_only", "scan_both", "scan_neither"])


def scan_versions(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    df = lake.sql(f"""
        WITH vn AS (
            SELECT DISTINCT r.iso_week, r.address, r.quic_versions FROM scan_replies r
             WHERE r.reply_kind = 'quic-vn' AND {_in('r.iso_week', weeks)} AND {_in('r.vantage_id', vantages)}),
        tot AS (SELECT iso_week, count(DISTINCT address) AS vn_addresses FROM vn GROUP BY 1),
        ex AS {lake.explode('vn', 'quic_versions', 'v')}
        SELECT ex.iso_week, CASE WHEN (v & 252645135) = 168430090 THEN -1 ELSE v END AS version,
               count(DISTINCT ex.address) AS addresses, t.vn_addresses
          FROM ex JOIN tot t ON t.iso_week = ex.iso_week
         GROUP BY 1, 2, 4 ORDER BY 1, 3 DESC, 2""")
    df = _ints(df, ["version", "addresses", "vn_addresses"])
    df["version_name"] = [("grease" if v == -1 else names.quic_version_name(v)) for v in df["version"]]
    return df


def stack_fingerprints(lake: Lake, weeks=None, vantages=None, verified_only=True) -> pd.DataFrame:
    if verified_only:
        sql = "WITH " + _verified(weeks, vantages) + f""",
            fp AS (SELECT rep.iso_week, rep.address,
                          {lake.fingerprint('coalesce(rep.scan_versions, sr.quic_versions)')} AS fp
                     FROM rep LEFT JOIN scan_replies sr
                       ON sr.scan_id = rep.scan_id AND sr.port = rep.port AND sr.address = rep.address)
            SELECT iso_week, fp AS fingerprint, count(*) AS addresses FROM fp GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2"""
    else:
        sql = f"""
            WITH fp AS (
                SELECT iso_week, address, {lake.fingerprint('quic_versions')} AS fp FROM (
                  SELECT r.*, row_number() OVER (PARTITION BY r.iso_week, r.address ORDER BY r.port) AS rn
                    FROM scan_replies r
                   WHERE r.reply_kind = 'quic-vn' AND {_in('r.iso_week', weeks)} AND {_in('r.vantage_id', vantages)}) x
                 WHERE rn = 1)
            SELECT iso_week, fp AS fingerprint, count(*) AS addresses FROM fp GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2"""
    df = _ints(lake.sql(sql), ["addresses"])
    df["fingerprint"] = [_fp_label(f) for f in df["fingerprint"]]
    return df


def _leaf_sql(lake: Lake, src: str) -> str:
    """census._leaf_sql over the release: the verified chain's leaf, else the QUIC leaf the
    same source recorded for the address in the same week (the row's port, or 853, 784,
    8853 when the port was not recorded)."""
    if not lake.has("observed_certificates"):
        return f"""SELECT s.*, c.subject_cn, 'sha256:' || {lake.first('s.cert_chain')} AS leaf
                     FROM {src} s LEFT JOIN (SELECT DISTINCT sha256, subject_cn FROM certificates) c
                       ON c.sha256 = {lake.first('s.cert_chain')}"""
    return f"""
        SELECT * FROM (
          SELECT s.*, coalesce(c.subject_cn, o.subject_cn) AS subject_cn,
                 coalesce('sha256:' || {lake.first('s.cert_chain')}, 'sha256:' || o.sha256, 'md5:' || o.md5) AS leaf,
                 row_number() OVER (PARTITION BY s.iso_week, s.vantage_id, s.run_id, s.address, s.port
                                    ORDER BY {names.sql_port_rank('o.port')},
                                             o.port) AS rn_leaf
            FROM {src} s
            LEFT JOIN (SELECT DISTINCT sha256, subject_cn FROM certificates) c ON c.sha256 = {lake.first('s.cert_chain')}
            LEFT JOIN observed_certificates o
              ON s.cert_chain IS NULL AND o.address = s.address AND o.iso_week = s.iso_week AND o.vantage_id = s.vantage_id
             AND o.protocol = 'quic' AND (s.port = {PORT_UNKNOWN} OR o.port = s.port)) x
         WHERE rn_leaf = 1"""


def top_providers(lake: Lake, weeks=None, vantages=None, top: int = 10) -> pd.DataFrame:
    df = lake.sql("WITH " + _verified(weeks, vantages) + """,
        cn AS (SELECT iso_week, coalesce(nullif(subject_cn, ''), '(no CN)') AS subject_cn FROM (""" + _leaf_sql(lake, "rep") + """) l)
        SELECT iso_week, subject_cn, count(*) AS resolvers FROM cn GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2""")
    df = _ints(df, ["resolvers"])
    if df.empty:
        return df
    order = df.groupby("subject_cn")["resolvers"].sum().sort_values(ascending=False)
    keep = set(order.index[:top])
    df["subject_cn"] = [c if c in keep else "other" for c in df["subject_cn"]]
    return df.groupby(["iso_week", "subject_cn"], as_index=False)["resolvers"].sum()


def certificate_counts(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    df = lake.sql("WITH " + _verified(weeks, vantages) + """
        SELECT coalesce(iso_week, 'all') AS iso_week, count(DISTINCT leaf) AS certificates,
               count(DISTINCT address) AS resolvers
          FROM (""" + _leaf_sql(lake, "verified") + """) l
         GROUP BY GROUPING SETS ((iso_week), ()) ORDER BY 1""")
    return _ints(df, ["certificates", "resolvers"])


_CHURN = """,
    s AS (SELECT DISTINCT iso_week, address FROM members),
    w AS (SELECT iso_week, row_number() OVER (ORDER BY iso_week) AS i FROM (SELECT DISTINCT iso_week FROM s) x),
    sw AS (SELECT s.address, w.iso_week, w.i FROM s JOIN w ON w.iso_week = s.iso_week)
    SELECT a.iso_week, a.i AS week_index, count(*) AS total, count(p.address) AS kept_from_previous,
           count(f.address) AS kept_from_first
      FROM sw a
      LEFT JOIN sw p ON p.address = a.address AND p.i = a.i - 1
      LEFT JOIN sw f ON f.address = a.address AND f.i = 1
     GROUP BY a.iso_week, a.i ORDER BY a.i"""


def membership_by_week(lake: Lake, kind: str = "doq", weeks=None, vantages=None) -> pd.DataFrame:
    if kind == "doq":
        sql = "WITH " + _verified(weeks, vantages) + ", members AS (SELECT iso_week, address FROM verified)" + _CHURN
    elif kind == "doudp":
        sql = f"""WITH members AS (
            SELECT r.iso_week, r.address FROM scan_replies r
             WHERE r.port = 53 AND r.reply_kind = 'dns' AND {_in('r.dns_rcode', DOUDP_RCODES)}
               AND {_in('r.iso_week', weeks)} AND {_in('r.vantage_id', vantages)})""" + _CHURN
    else:
        raise ValueError(f"membership kind {kind!r}: want 'doq' or 'doudp'")
    return _ints(lake.sql(sql), ["week_index", "total", "kept_from_previous", "kept_from_first"])


def _geo(lake: Lake, week, vantages) -> str:
    wk = _lit(week) if week else "(SELECT max(iso_week) FROM rep)"
    return "WITH " + _verified(None, vantages) + f""",
    sel AS (SELECT * FROM rep WHERE iso_week = {wk}),
    g0 AS (SELECT DISTINCT address, city_dataset, asn_dataset, asn, as_org, country, continent, city, latitude, longitude
             FROM resolver_geo),
    geo AS (SELECT * FROM (
              SELECT sel.address, g.asn, g.as_org, g.country, g.continent, g.city, g.latitude, g.longitude,
                     row_number() OVER (PARTITION BY sel.address
                                        ORDER BY (g.city_dataset = sel.city_dataset AND g.asn_dataset = sel.asn_dataset) DESC NULLS LAST,
                                                 d.build_time DESC) AS rn_geo
                FROM sel LEFT JOIN g0 g ON g.address = sel.address
                LEFT JOIN datasets d ON d.dataset_id = g.city_dataset) x WHERE rn_geo = 1)"""


def geo_counts(lake: Lake, by: str, week: str | None = None, vantages=None) -> pd.DataFrame:
    if by == "asn":
        sel = "coalesce(CAST(asn AS STRING), '??') AS asn, coalesce(max(as_org), '') AS as_org"
    elif by in ("continent", "country"):
        sel = f"coalesce({by}, '??') AS {by}"
    else:
        raise ValueError(f"geo_counts by {by!r}: want continent, country or asn")
    df = lake.sql(_geo(lake, week, vantages) + f"""
        SELECT {sel}, count(*) AS resolvers FROM geo GROUP BY 1 ORDER BY resolvers DESC, 1""")
    df = _ints(df, ["resolvers"])
    df["share"] = df["resolvers"] / df["resolvers"].sum() if len(df) else []
    return df


def geo_points(lake: Lake, week: str | None = None, vantages=None, grid_deg: float = 0.5) -> pd.DataFrame:
    g = f"CAST({float(grid_deg)!r} AS DOUBLE)"
    df = lake.sql(_geo(lake, week, vantages) + f"""
        SELECT CAST({_rint(f'latitude / {g}')} * {g} AS DOUBLE) AS latitude,
               CAST({_rint(f'longitude / {g}')} * {g} AS DOUBLE) AS longitude,
               count(*) AS resolvers
          FROM geo WHERE latitude IS NOT NULL AND longitude IS NOT NULL GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2""")
    return _ints(df, ["resolvers"])


# ----------------------------------------------------------------------------------
# Measurements (the response-times notebook).

# The facts cache (DuckDB): per file set, its successful measurements (status ok with an
# rcode) with only the columns the response-time analysis reads, the DoQ handshake's
# cause joined from handshake_analyses, ordered by the groups the distributions are
# computed over (so a group's rows are a few row groups). Built once per file set from
# its measurements and handshake_analyses files (rebuilt when their SHA-256 in the
# manifest changes, or FACTS_VERSION does); every later report reads it instead of the
# wide measurement rows and the join.
FACTS_VERSION = 1
FACTS_ORDER = "vantage_id, protocol, phase, mode, key_share, address"
FACTS_ROW_GROUP = 65536


def facts_cache_dir(lake: Lake) -> str:
    """Where the facts cache lives: $DOQSCAN_LAKE_CACHE, else .cache/ inside the release,
    else (a release that is not writable) a temporary directory of this process."""
    import tempfile
    root = os.environ.get("DOQSCAN_LAKE_CACHE") or os.path.join(lake.path, ".cache")
    root = os.path.join(root, "facts")
    try:
        os.makedirs(root, exist_ok=True)
        if os.access(root, os.W_OK):
            return root
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="doqscan-facts-")


def facts_files(lake: Lake, weeks=None, vantages=None) -> list[str]:
    """The facts cache's files of the selected file sets, built where missing or stale."""
    root = facts_cache_dir(lake)
    out = []
    for fs in lake.manifest.get("file_sets", []):
        week, vp = fs["iso_week"], fs["vantage_id"]
        if vp.startswith("_") or (weeks is not None and week not in weeks) or \
                (vantages is not None and vp not in vantages):
            continue
        src = {f["table"]: f for f in fs["files"] if f["table"] in ("measurements", "handshake_analyses")}
        m = src.get("measurements")
        if not m or not m.get("rows"):
            continue
        stamp = {"version": FACTS_VERSION, **{t: f.get("sha256") or f.get("bytes") for t, f in sorted(src.items())}}
        path = os.path.join(root, week, vp + ".parquet")
        meta = path[:-len(".parquet")] + ".json"
        try:
            with open(meta) as fh:
                fresh = json.load(fh) == stamp and os.path.exists(path)
        except (OSError, ValueError):
            fresh = False
        if not fresh:
            _build_facts(lake, os.path.join(lake.path, m["path"]),
                         os.path.join(lake.path, src["handshake_analyses"]["path"]) if "handshake_analyses" in src
                         else None, path)
            tmp = f"{meta}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                json.dump(stamp, fh)
            os.replace(tmp, meta)
        out.append(path)
    return out


def _build_facts(lake: Lake, measurements: str, analyses: str | None, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if analyses:
        h = f"""LEFT JOIN (SELECT measurement_id, cause FROM read_parquet({_lit(analyses)})) h
                  ON m.protocol = 'doq' AND h.measurement_id = m.measurement_id"""
        hc = "h.measurement_id IS NOT NULL AS analysed, h.cause"
    else:
        h, hc = "", "FALSE AS analysed, CAST(NULL AS VARCHAR) AS cause"
    tmp = f"{path}.{os.getpid()}.tmp"  # two reports writing the same file set do not mix their bytes
    lake.db.execute(f"""
        COPY (SELECT m.iso_week, m.vantage_id, m.campaign_id, m.address, m.protocol, m.port, m.phase,
                     m.mode, m.key_share, m.resolve_ns, m.handshake_ns, m.rtt_median_ns AS rtt_ns, {hc}
                FROM read_parquet({_lit(measurements)}) m {h}
               WHERE m.status = 'ok' AND m.rcode IS NOT NULL
               ORDER BY {', '.join('m.' + c.strip() for c in FACTS_ORDER.split(','))})
        TO {_lit(tmp)} (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {FACTS_ROW_GROUP})""")
    os.replace(tmp, path)


class LakeFacts:
    """The successful measurements (status ok with an rcode) of a selection, as SQL over
    the release: `ok` (one row per measurement with its paired RTT, the release's
    measurements.rtt_median_ns) and the DoX set, computed once per selection. On DuckDB
    `ok` reads the facts cache (facts_files) and carries each DoQ measurement's handshake
    cause (`analysed`, `cause`); on Spark it reads the measurements."""

    _serial = 0  # names each selection's DoX table apart

    def __init__(self, lake: Lake, weeks=None, vantages=None):
        self.lake, self.weeks, self.vantages = lake, weeks, vantages
        self.cached = lake.engine == "duckdb"
        if self.cached:
            files = facts_files(lake, weeks, vantages)
            src = ("read_parquet([" + ", ".join(_lit(f) for f in files) + "])") if files else \
                "(SELECT * FROM measurements WHERE FALSE)"
            cols = "analysed, cause" if files else "FALSE AS analysed, CAST(NULL AS VARCHAR) AS cause"
            self.ok = f"""(SELECT vantage_id, campaign_id, address, protocol, port, phase, mode, key_share,
                                  resolve_ns, handshake_ns, {'rtt_ns' if files else 'rtt_median_ns AS rtt_ns'}, {cols}
                             FROM {src} f)"""
        else:
            self.ok = f"""(SELECT vantage_id, campaign_id, measurement_id, address, protocol, port, phase, mode, key_share,
                                  resolve_ns, handshake_ns, rtt_median_ns AS rtt_ns
                             FROM measurements
                            WHERE status = 'ok' AND rcode IS NOT NULL AND {_in('iso_week', weeks)}
                              AND {_in('vantage_id', vantages)})"""
        self._dox = None

    def dox_table(self) -> str:
        """The name of the DoX set's table (vantage_id, address of every resolver that
        answered a measured query over each DoX protocol), computed on first use."""
        if self._dox is None:
            LakeFacts._serial += 1
            name = f"dox_set_{LakeFacts._serial}"
            self.lake.materialize(name, f"""
                SELECT vantage_id, address FROM (
                  SELECT DISTINCT vantage_id, address, protocol FROM {self.ok} ok
                   WHERE phase = 'measured' AND {_in('protocol', names.DOX_PROTOCOLS)}) x
                 GROUP BY 1, 2 HAVING count(*) = {len(names.DOX_PROTOCOLS)}""")
            self._dox = name
        return self._dox

    @property
    def paired(self) -> str:
        """`ok` with each row's handshake-to-RTT ratio and whether its resolver is DoX."""
        return f"""(SELECT ok.*, CAST(ok.handshake_ns AS DOUBLE) / CASE WHEN ok.rtt_ns = 0 THEN NULL ELSE ok.rtt_ns END AS ratio,
                           (d.address IS NOT NULL) AS dox
                      FROM {self.ok} ok LEFT JOIN {self.dox_table()} d ON d.vantage_id = ok.vantage_id AND d.address = ok.address)"""


def measurement_facts(lake: Lake, weeks=None, vantages=None, refresh: bool = True) -> LakeFacts:
    return LakeFacts(lake, weeks, vantages)


def answering(lake: Lake, weeks=None, vantages=None, refresh: bool = True, facts: LakeFacts | None = None) -> pd.DataFrame:
    f = facts or LakeFacts(lake, weeks, vantages)
    df = lake.sql(f"""
        SELECT vantage_id, protocol, count(DISTINCT address) AS resolvers FROM {f.ok} ok
         WHERE phase = 'measured' GROUP BY 1, 2
        UNION ALL
        SELECT vantage_id, 'dox', count(*) FROM {f.dox_table()} GROUP BY 1""")
    df = _ints(df, ["resolvers"])
    return df.sort_values(["vantage_id", "protocol"], kind="stable").reset_index(drop=True)


def order_statistics(lake: Lake, rel: str, groups: list[str], value: str, ranks_of) -> dict:
    """Exact order statistics of `value` per group of `rel`: order_statistics_of with one
    value. Returns {group tuple: (n, {rank: value})}."""
    return order_statistics_of(lake, rel, groups, [value], ranks_of)[value]


def order_statistics_of(lake: Lake, rel: str, groups: list[str], values: list[str], ranks_of) -> dict:
    """Exact order statistics of each of `values` (SQL expressions over `rel`, the SQL text
    of a relation) per group: ranks_of(n) gives the 1-based ranks wanted in a group of n
    non-null (and not NaN) values. Each group's values are sorted whole: on DuckDB in
    this process, one group at a time (_order_statistics_local); on Spark on the
    executors, one group per call (_order_statistics_spark). Returns {value: {group
    tuple: (n, {rank: value})}}."""
    if lake.engine == "duckdb":
        return _order_statistics_local(lake, rel, groups, values, ranks_of)
    return _order_statistics_spark(lake, rel, groups, values, ranks_of)


def _order_statistics_spark(lake: Lake, rel: str, groups: list[str], values: list[str], ranks_of) -> dict:
    """order_statistics_of on Spark: the groups get integer ids (a small table joined by
    broadcast, NULL-safe), one shuffle brings each group's rows (its id and every value)
    to one executor call (applyInArrow), which sorts each value's column with numpy and
    returns only the wanted ranks. The shuffle sorts by the integer id alone, not by the
    values; memory on an executor is one group's values."""
    import pyarrow as pa
    from pyspark.sql import types as T

    out = {v: {} for v in values}
    spark = lake.spark
    gsel = ", ".join(groups)
    keys = [()]
    if groups:
        keys = [tuple(k) for k in spark.sql(f"SELECT DISTINCT {gsel} FROM {rel} r").collect()]
        if not keys:
            return out
        schema = spark.sql(f"SELECT {gsel} FROM {rel} r").schema
        kdf = spark.createDataFrame([k + (i,) for i, k in enumerate(keys)],
                                    T.StructType(list(schema.fields) + [T.StructField("gid_", T.IntegerType(), False)]))
        kdf.createOrReplaceTempView("os_keys_")
        on = " AND ".join(f"r.{c} <=> k.{c}" for c in groups)
        src = f"{rel} r JOIN os_keys_ k ON {on}"
        hint, gid = "/*+ BROADCAST(k) */ ", "k.gid_"
    else:
        src, hint, gid = f"{rel} r", "", "0"
    xs = ", ".join(f"CAST({v} AS DOUBLE) AS x{i}_" for i, v in enumerate(values))
    df = spark.sql(f"SELECT {hint}CAST({gid} AS INT) AS gid_, {xs} FROM {src}")
    nv = len(values)

    def ranks(tbl: pa.Table) -> pa.Table:
        gids, ms, ns, rs, got = [], [], [], [], []
        g = tbl.column("gid_")[0].as_py() if tbl.num_rows else None
        for i in range(nv):
            x = tbl.column(f"x{i}_").to_numpy(zero_copy_only=False)  # NULL -> NaN
            x = np.sort(x[~np.isnan(x)])
            if len(x) == 0:
                continue
            want = np.asarray(sorted(set(ranks_of(len(x)))), dtype=np.int64)
            gids.append(np.full(len(want), g, dtype=np.int32))
            ms.append(np.full(len(want), i, dtype=np.int32))
            ns.append(np.full(len(want), len(x), dtype=np.int64))
            rs.append(want)
            got.append(x[want - 1])
        cat = (lambda parts, dt: np.concatenate(parts) if parts else np.empty(0, dtype=dt))  # noqa: E731
        return pa.table({"gid_": cat(gids, np.int32), "m_": cat(ms, np.int32), "n_": cat(ns, np.int64),
                         "rank_": cat(rs, np.int64), "x_": cat(got, np.float64)})

    res = df.groupBy("gid_").applyInArrow(ranks, "gid_ int, m_ int, n_ long, rank_ long, x_ double").toPandas()
    for g, m, n, r, x in zip(res["gid_"].tolist(), res["m_"].tolist(), res["n_"].tolist(), res["rank_"].tolist(),
                             res["x_"].tolist()):
        st = out[values[m]].setdefault(keys[g], (int(n), {}))
        st[1][int(r)] = float(x)
    return out


# Group columns whose values the local order statistics split in numpy (one query
# fetches every value of the other columns' group): few (dox) or many (address) values.
_SPLIT = ("dox", "address")


def _eq(col: str, v) -> str:
    return f"{col} IS NULL" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{col} = {_lit(v)}"


def _outer_keys(lake: Lake, rel: str, outer: list[str]) -> list[tuple]:
    if not outer:
        return [()]
    return [tuple(r) for r in lake.db.execute(f"SELECT DISTINCT {', '.join(outer)} FROM {rel} r").fetchall()]


def _local_fetch(lake: Lake, rel: str, outer: list[str], split: list[str], exprs: list[str], keys_rel: str | None = None):
    """(outer key, Arrow table) per group of rel without the split columns: one query per
    group reads the split columns and every expression (x0_, x1_, ...) at once (a few row
    groups of the facts cache, which is ordered by the groups). An `address` split column
    comes back as an integer code (the table addr_codes_, one code per address of rel,
    in address order: _addresses lists them), not as text. The groups and addresses are
    read from keys_rel (default rel): a relation holding at least rel's rows that is
    cheaper to read (without rel's joins); a group without rows yields an empty table."""
    keys_rel = keys_rel or rel
    join, sel = "", []
    if "address" in split:
        lake.db.execute(f"""CREATE OR REPLACE TEMP TABLE addr_codes_ AS
                              SELECT address, CAST(row_number() OVER (ORDER BY address) - 1 AS INTEGER) AS code_
                                FROM (SELECT DISTINCT address FROM {keys_rel} r) a""")
        join = " JOIN addr_codes_ ac_ ON ac_.address = r.address"
    for c in split:
        sel.append("ac_.code_ AS address" if c == "address" else f"r.{c}")
    sel += [f"{x} AS x{i}_" for i, x in enumerate(exprs)]
    for key in _outer_keys(lake, keys_rel, outer):
        where = " AND ".join([_eq(f"r.{c}", k) for c, k in zip(outer, key)] + ["TRUE"])
        yield key, lake.db.sql(f"SELECT {', '.join(sel)} FROM {rel} r{join} WHERE {where}").to_arrow_table()


def _addresses(lake: Lake) -> list[str]:
    return [r[0] for r in lake.db.execute("SELECT address FROM addr_codes_ ORDER BY code_").fetchall()]


def _values(tbl, col: str):
    """The non-null (and not NaN) values of an Arrow column as numpy (int64 for an integer
    column, float64 otherwise) and the row mask they came from (None: every row)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    c = tbl.column(col)
    integer = pa.types.is_integer(c.type)
    if not integer:
        c = c.cast(pa.float64())
    mask = None
    if c.null_count:
        mask = c.is_valid()
    if not integer:
        nan = pc.is_nan(c.fill_null(0.0))
        if pc.any(nan).as_py():
            mask = pc.and_(mask, pc.invert(nan)) if mask is not None else pc.invert(nan)
    if mask is not None:
        c = c.filter(mask)
        mask = mask.to_numpy()
    xs = c.to_numpy()
    return (xs.astype(np.int64, copy=False) if integer else xs.astype(np.float64, copy=False)), mask


def _order_statistics_local(lake: Lake, rel: str, groups: list[str], values: list[str], ranks_of) -> dict:
    """order_statistics_of on DuckDB: per group without the _SPLIT columns, one query
    fetches the group's values of every metric (_local_fetch) and numpy sorts them metric
    by metric; memory is one group's values."""
    outer = [c for c in groups if c not in _SPLIT]
    split = [c for c in groups if c in _SPLIT]
    out = {v: {} for v in values}
    addresses = None
    for key, tbl in _local_fetch(lake, rel, outer, split, values):
        if tbl.num_rows == 0:
            continue
        if "address" in split and addresses is None:
            addresses = _addresses(lake)
        codes, uniq = _codes(tbl, split, {"address": addresses})

        for v, got in zip(values, _sort_pool().map(lambda i, t=tbl, c=codes, u=uniq: _split_ranks(t, i, c, u, ranks_of),
                                                    range(len(values)))):
            for u, n, ranks in got:
                full = dict(zip(outer, key)) | dict(zip(split, u))
                out[v][tuple(full[c] for c in groups)] = (n, ranks)
    return out


def _split_ranks(tbl, i: int, codes, uniq: list, ranks_of) -> list:
    """(split values, n, {rank: value}) of column x<i>_ of tbl per code present."""
    xs, mask = _values(tbl, f"x{i}_")
    if len(xs) == 0:
        return []
    c = codes if codes is None or mask is None else codes[mask]
    return [(u, len(part), {r: float(part[r - 1]) for r in sorted(set(ranks_of(len(part))))})
            for u, part in _split_sorted(c, uniq, xs)]


_pool = None


def _sort_pool():
    """The threads the local order statistics sort metrics on, one per core."""
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor
        _pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="doqscan-sort")
    return _pool


def _codes(tbl, split: list[str], coded: dict | None = None):
    """(a code per row, the split columns' values of each code) of the Arrow table tbl;
    (None, [()]) without split columns. A column in `coded` holds integer codes already
    (0..n-1), coded[col] their n values."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if not split:
        return None, [()]
    codes = np.zeros(tbl.num_rows, dtype=np.int64)
    uniq = [()]
    for c in split:
        col = tbl.column(c)
        if coded and coded.get(c) is not None:
            idx, dic = col.to_numpy().astype(np.int64), coded[c]
        elif pa.types.is_boolean(col.type) and col.null_count == 0:
            idx, dic = col.to_numpy(zero_copy_only=False).astype(np.int64), [False, True]
        else:
            enc = pc.dictionary_encode(col).combine_chunks()
            idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            dic = enc.dictionary.to_pylist()
        codes = codes * len(dic) + idx
        uniq = [u + (d,) for u in uniq for d in dic]
    return codes, uniq


def _split_sorted(codes, uniq: list, xs: np.ndarray):
    """(split values, the sorted values xs of that code) for each code present."""
    if codes is None:
        yield (), _sorted(xs)
        return
    if len(uniq) <= 16:  # few (DoX or not): sort each part
        for i, u in enumerate(uniq):
            part = xs[codes == i]
            if len(part):
                yield u, _sorted(part)
        return
    ends = np.cumsum(np.bincount(codes, minlength=len(uniq)))
    cbits = max(len(uniq) - 1, 1).bit_length()
    if xs.dtype.kind == "i" and len(xs) and int(xs.min()) >= 0 and \
            max(int(xs.max()), 1).bit_length() + cbits <= 63:
        # many codes, non-negative integers: one sort of (code, value) packed into one
        # integer, the code in the high bits (a sort of int64 is several times faster
        # than an argsort)
        vbits = 63 - cbits
        packed = codes << vbits
        packed |= xs
        packed.sort()
        packed &= (1 << vbits) - 1
        xs = packed
    else:
        # sort by value, then stably by code (a radix sort for 16-bit codes)
        order = np.argsort(xs)
        c = codes[order]
        c = c.astype(np.uint16) if len(uniq) <= 1 << 16 else c
        order = order[np.argsort(c, kind="stable")]
        xs = xs[order]
    start = 0
    for u, end in zip(uniq, ends.tolist()):
        if end > start:
            yield u, xs[start:end]
        start = end


def _median_ranks(n: int) -> list[int]:
    pos = 0.5 * (n - 1)
    return [int(math.floor(pos)) + 1, int(math.ceil(pos)) + 1]


def _median(n: int, got: dict) -> float:
    pos = 0.5 * (n - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    a, b = got[lo + 1], got[hi + 1]
    return float(a) if lo == hi else float(a + (b - a) * (pos - lo))


def response_times(lake: Lake, weeks=None, vantages=None, dox_only: bool = False, require_rtt: bool = True,
                   points: int = DEFAULT_POINTS, group_by: Sequence[str] = GROUP_COLUMNS, refresh: bool = True,
                   facts: LakeFacts | None = None, addresses: Sequence[str] | None = None) -> pd.DataFrame:
    # address: peer_response_times' groups (each peer apart, in one pass)
    bad = set(group_by) - set(GROUP_COLUMNS) - {"address"}
    if bad:
        raise ValueError(f"cannot group by {sorted(bad)}; allowed: {sorted(GROUP_COLUMNS)}")
    group_by = list(group_by)
    f = facts or LakeFacts(lake, weeks, vantages)
    cond = ["TRUE"]
    if require_rtt:
        cond.append("(protocol = 'doudp' OR rtt_ns IS NOT NULL)")
    if addresses is not None:
        cond.append(_in("address", [str(a) for a in addresses]))
    # the rows without the DoX join: where the local path reads the groups and addresses
    # (a few row groups when the addresses are given: the facts cache is ordered by them
    # within a group)
    unpaired = f"(SELECT * FROM {f.ok} ok WHERE {' AND '.join(cond)})"
    if dox_only:
        cond.append("dox")
    rel = f"(SELECT * FROM {f.paired} p WHERE {' AND '.join(cond)})"
    gsel = ", ".join(group_by)
    cls = f"LEAST(GREATEST({_rint('ratio')}, 1), {ROUND_TRIP_CLASSES})"
    aggs = ", ".join([f"count({m}) AS {m}_n" for m in METRICS] +
                     [f"{lake.exact_sum('resolve_ns')} AS resolve_ns_sum",
                      f"{lake.exact_sum('handshake_ns')} AS handshake_ns_sum",
                      "sum(rtt_ns) AS rtt_ns_sum", "sum(ratio) AS ratio_sum"] +
                     [f"sum(CASE WHEN cls_ = {k} THEN 1 ELSE 0 END) AS round_trips_{k}"
                      for k in range(1, ROUND_TRIP_CLASSES + 1)])
    probs = np.asarray([k / points for k in range(1, points + 1)])

    def ranks_of(n):
        return sorted(set(np.clip(np.ceil(probs * n).astype(np.int64), 1, n).tolist()) | set(_median_ranks(n)))

    if lake.engine == "duckdb":
        base, stats = _response_groups_local(lake, rel, group_by, ranks_of, unpaired)
    else:
        # the round-trip class once per row, not once per class
        classed = f"(SELECT r.*, CASE WHEN ratio IS NOT NULL THEN {cls} END AS cls_ FROM {rel} r)"
        base = lake.sql(f"""SELECT {gsel + ', ' if group_by else ''}count(*) AS n, count(DISTINCT address) AS resolvers, {aggs}
                              FROM {classed} r {'GROUP BY ' + gsel if group_by else ''}""")
        stats = None
    cols = group_by + ["n", "resolvers"] + [f"{m}_{s}" for m in METRICS for s in ("n", "mean", "median", "q")] \
        + [f"round_trips_{k}" for k in range(1, ROUND_TRIP_CLASSES + 1)]
    if base.empty or (not group_by and int(base["n"].iloc[0]) == 0):
        return pd.DataFrame(columns=cols)
    if stats is None:
        stats = order_statistics_of(lake, rel, group_by, METRICS, ranks_of)
    rows = []
    for r in base.itertuples(index=False):
        rec = {c: getattr(r, c) for c in group_by}
        key = tuple(rec[c] for c in group_by)
        rec["n"], rec["resolvers"] = int(r.n), int(r.resolvers)
        for m in METRICS:
            n = int(getattr(r, f"{m}_n"))
            rec[f"{m}_n"] = n
            if n == 0:
                rec[f"{m}_mean"] = rec[f"{m}_median"] = None
                rec[f"{m}_q"] = np.empty(0)
                continue
            s = getattr(r, f"{m}_sum")
            rec[f"{m}_mean"] = (int(s) / n) if m in ("resolve_ns", "handshake_ns") else float(s) / n
            _, got = stats[m][key]
            rec[f"{m}_median"] = _median(n, got)
            rank = np.clip(np.ceil(probs * n).astype(np.int64), 1, n)
            rec[f"{m}_q"] = np.asarray([got[int(k)] for k in rank], dtype=np.float64)
        for k in range(1, ROUND_TRIP_CLASSES + 1):
            rec[f"round_trips_{k}"] = int(getattr(r, f"round_trips_{k}"))
        rows.append(rec)
    df = pd.DataFrame(rows, columns=cols)
    if "dox" in df:
        df["dox"] = df["dox"].astype(bool)
    if len(df) and group_by:
        df = df.sort_values(group_by, kind="stable").reset_index(drop=True)
    return df


def _sum(xs: np.ndarray):
    """The sum of a metric's values: exact (a Python int) for integers, a float sum for
    floats (the paired RTT is an interpolated median: halves)."""
    return _exact_sum(xs) if xs.dtype.kind in "iu" else float(xs.sum())


def _exact_sum(xs: np.ndarray) -> int:
    """The exact sum of int64 values (a Python int): numpy's int64 sum where it cannot
    overflow, else in chunks that cannot."""
    if len(xs) == 0:
        return 0
    big = max(abs(int(xs.max())), abs(int(xs.min())), 1)
    step = max((1 << 62) // big, 1)
    return sum(int(xs[i:i + step].sum()) for i in range(0, len(xs), step))


def _part_figures(tbl, i: int, parts: list, present, ranks_of) -> list:
    """(part, figures, (n, {rank: value}) or None) of METRICS[i] (column x<i>_ of tbl) per
    part of `parts` ((split values, row mask or None)) in `present`: count, exact sum,
    round-trip classes (the ratio), order statistics."""
    m = METRICS[i]
    xs, mask = _values(tbl, f"x{i}_")
    got = []
    for u, sel in parts:
        if u not in present:
            continue
        part = xs if sel is None else xs[sel if mask is None else sel[mask]]
        fig = {f"{m}_n": len(part), f"{m}_sum": _sum(part) if len(part) else None}
        if m == "ratio":
            cls = np.bincount(np.clip(np.rint(part), 1, ROUND_TRIP_CLASSES).astype(np.int64),
                              minlength=ROUND_TRIP_CLASSES + 1)
            fig |= {f"round_trips_{k}": int(cls[k]) for k in range(1, ROUND_TRIP_CLASSES + 1)}
        ranks = None
        if len(part):
            part = _sorted(part)
            ranks = (len(part), {r: float(part[r - 1]) for r in sorted(set(ranks_of(len(part))))})
        got.append((u, fig, ranks))
    return got


def _sorted(xs: np.ndarray) -> np.ndarray:
    """xs sorted: in place when xs is a copy of its own (a selection), else a sorted copy
    (a read-only view of Arrow's buffer)."""
    if xs.flags.writeable and xs.flags.owndata:
        xs.sort()
        return xs
    return np.sort(xs)


def _response_groups_local(lake: Lake, rel: str, group_by: list[str], ranks_of,
                           keys_rel: str) -> tuple[pd.DataFrame, dict]:
    """response_times' aggregates on DuckDB from one read of each group's rows
    (_local_fetch): the rows and resolvers, each metric's count, exact sum and order
    statistics, and the round-trip classes, per group; the same figures as the SQL of the
    Spark path. Returns (base frame, {metric: {group: (n, {rank: value})}})."""
    outer = [c for c in group_by if c not in _SPLIT]
    split = [c for c in group_by if c in _SPLIT]
    # the address as a code: counting distinct resolvers needs no text
    fetch_split = split + ([] if "address" in split else ["address"])
    rows, stats = [], {m: {} for m in METRICS}
    addresses = None
    for key, tbl in _local_fetch(lake, rel, outer, fetch_split, METRICS, keys_rel):
        if tbl.num_rows == 0:
            continue
        if addresses is None and "address" in split:
            addresses = _addresses(lake)
        codes, uniq = _codes(tbl, split, {"address": addresses})
        addr = tbl.column("address").to_numpy()
        parts = [(u, None if codes is None else codes == i) for i, u in enumerate(uniq)]
        recs = {}
        for u, sel in parts:
            n = tbl.num_rows if sel is None else int(sel.sum())
            if n == 0:
                continue
            a = addr if sel is None else addr[sel]
            full = dict(zip(outer, key)) | dict(zip(split, u))
            recs[u] = {**{c: full[c] for c in group_by}, "n": n,
                       "resolvers": int(np.count_nonzero(np.bincount(a)))}
        # the metrics' sorts at once (numpy sorts outside the GIL)
        fn = lambda i, t=tbl, p=parts, r=set(recs): _part_figures(t, i, p, r, ranks_of)  # noqa: E731
        for i, got in enumerate(_sort_pool().map(fn, range(len(METRICS)))):
            for u, fig, ranks in got:
                recs[u] |= fig
                if ranks is not None:
                    stats[METRICS[i]][tuple(recs[u][c] for c in group_by)] = ranks
        rows.extend(recs.values())
    return pd.DataFrame(rows), stats


def per_resolver_medians(lake: Lake, weeks=None, vantages=None, phase: str = "measured", mode: str = "fresh",
                         refresh: bool = True) -> pd.DataFrame:
    f = LakeFacts(lake, weeks, vantages)
    rel = f"(SELECT * FROM {f.ok} ok WHERE phase = {_lit(phase)} AND mode = {_lit(mode)})"
    groups = ["vantage_id", "protocol", "address"]
    base = lake.sql(f"SELECT vantage_id, protocol, address, count(*) AS queries FROM {rel} r GROUP BY 1, 2, 3")
    cols = ["vantage_id", "protocol", "address", "queries", "resolve_ns", "handshake_ns", "rtt_ns"]
    if base.empty:
        return pd.DataFrame(columns=cols)
    metrics = ["resolve_ns", "handshake_ns", "rtt_ns"]
    stats = order_statistics_of(lake, rel, groups, metrics, _median_ranks)
    for m in metrics:
        st = stats[m]
        base[m] = [(_median(*st[k]) if k in st else np.nan)
                   for k in zip(base["vantage_id"], base["protocol"], base["address"])]
    base["queries"] = base["queries"].astype(int)
    base = base.sort_values(["vantage_id", "protocol", "address"], kind="stable").reset_index(drop=True)
    return base[cols]


def peer_response_times(lake: Lake, peers: pd.DataFrame, facts: LakeFacts | None = None, weeks=None, vantages=None,
                        refresh: bool = True) -> pd.DataFrame:
    """measurements.peer_response_times over a release: every peer in one pass (grouped
    by address too), not one pass per peer; the same rows in the same order."""
    if peers.empty:
        return pd.DataFrame()
    f = facts or LakeFacts(lake, weeks, vantages)
    addrs = [str(a) for a in peers["address"]]
    groups = ["vantage_id", "protocol", "phase", "mode"]
    rt = response_times(lake, facts=f, addresses=addrs, group_by=groups + ["address"])
    if rt.empty:
        return pd.DataFrame()
    order = {a: i for i, a in reversed(list(enumerate(addrs)))}
    rt = rt.assign(_order=rt["address"].map(order)).sort_values(["_order"] + groups, kind="stable")
    rt["resolvers"] = rt["resolvers"].astype(np.int64)
    cols = [c for c in rt.columns if c not in ("address", "_order")] + ["address"]
    return rt[cols].reset_index(drop=True)


def doq_causes(lake: Lake, weeks=None, vantages=None, facts: LakeFacts | None = None) -> pd.DataFrame:
    f = facts or LakeFacts(lake, weeks, vantages)
    cols = ["vantage_id", "phase", "mode", "key_share", "implementation", "cause", "handshakes"]
    if not lake.has("handshake_analyses"):
        return pd.DataFrame(columns=cols)
    impl = f"""SELECT address, fp FROM (
                 SELECT r.address, {lake.fingerprint('coalesce(r.scan_versions, sr.quic_versions)')} AS fp,
                        row_number() OVER (PARTITION BY r.address ORDER BY vr.iso_week DESC,
                                           {names.sql_port_rank('r.port')}) AS rn
                   FROM verification_results r JOIN verification_runs vr ON vr.run_id = r.run_id
                   LEFT JOIN scan_replies sr ON sr.scan_id = vr.scan_id AND sr.port = r.port AND sr.address = r.address
                  WHERE r.outcome = 'doq-verified') x WHERE rn = 1"""
    # the facts cache carries the cause (joined when it was built); else join the analyses
    a = f"""SELECT vantage_id, phase, mode, key_share, address, cause FROM {f.ok} ok
             WHERE protocol = 'doq' AND analysed""" if f.cached else f"""
            SELECT ok.vantage_id, ok.phase, ok.mode, ok.key_share, ok.address, h.cause
              FROM {f.ok} ok JOIN handshake_analyses h ON h.measurement_id = ok.measurement_id
             WHERE ok.protocol = 'doq'"""
    # counted per address before the join with the fingerprints (one row per resolver and
    # cause, not per handshake)
    df = lake.sql(f"""
        WITH impl AS ({impl}),
        a AS (SELECT vantage_id, phase, mode, key_share, address, cause, count(*) AS n_
                FROM ({a}) x GROUP BY 1, 2, 3, 4, 5, 6)
        SELECT a.vantage_id, a.phase, a.mode, a.key_share, i.fp AS implementation, a.cause, sum(a.n_) AS handshakes
          FROM a LEFT JOIN impl i ON i.address = a.address
         GROUP BY 1, 2, 3, 4, 5, 6""")
    if df.empty:
        return pd.DataFrame(columns=cols)
    df["implementation"] = [_fp_label(x) for x in df["implementation"]]
    df = df.groupby(cols[:-1], as_index=False, dropna=False)["handshakes"].sum()
    df["handshakes"] = df["handshakes"].astype(np.int64)
    return df.sort_values(cols[:-1], kind="stable").reset_index(drop=True)[cols]


def features(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    df = lake.sql(f"""
        WITH per AS (SELECT address, protocol, feature, bool_or(supported) AS supported FROM resolver_features
                      WHERE {_in('iso_week', weeks)} AND {_in('vantage_id', vantages)} GROUP BY 1, 2, 3)
        SELECT protocol, feature, sum(CASE WHEN supported THEN 1 ELSE 0 END) AS supported,
               sum(CASE WHEN NOT supported THEN 1 ELSE 0 END) AS unsupported,
               sum(CASE WHEN supported IS NULL THEN 1 ELSE 0 END) AS unknown
          FROM per GROUP BY 1, 2 ORDER BY 1, 2""")
    return _ints(df, ["supported", "unsupported", "unknown"])


def bench_runs(lake: Lake, weeks=None) -> pd.DataFrame:
    from .benchruns import _LOSS_TOKEN, BENCH_COLUMNS
    if not lake.has("bench_runs"):
        return pd.DataFrame(columns=BENCH_COLUMNS)
    samples = "(SELECT bench_id, count(*) AS seconds FROM bench_samples GROUP BY 1)" if lake.has("bench_samples") \
        else "(SELECT CAST(NULL AS BIGINT) AS bench_id, 0 AS seconds WHERE FALSE)"
    df = lake.sql(f"""
        SELECT r.bench_id, r.started_at, r.label, r.report, r.protocol, r.variant, r.address, r.port, r.policy, r.load,
               r.workers, r.elapsed_s, r.sent, r.answered, r.qps, r.success_rate,
               CASE WHEN r.answered > 0 THEN r.latency_mean_ms END AS latency_mean_ms,
               CASE WHEN r.answered > 0 THEN r.latency_p50_ms END AS latency_p50_ms,
               CASE WHEN r.answered > 0 THEN r.latency_p99_ms END AS latency_p99_ms,
               CASE WHEN r.answered > 0 THEN r.total_mean_ms END AS total_mean_ms,
               coalesce(s.seconds, 0) AS seconds
          FROM bench_runs r LEFT JOIN {samples} s ON s.bench_id = r.bench_id
         WHERE {_in('r.iso_week', weeks)}
         ORDER BY r.started_at, r.bench_id""")
    if df.empty:
        return pd.DataFrame(columns=BENCH_COLUMNS)
    reps = [json.loads(x) if isinstance(x, str) and x else {} for x in df.pop("report")]
    df["target"] = [str(r.get("target") or "") for r in reps]
    df["total_p50_ms"] = [((r.get("total") or {}).get("p50_ms") if a > 0 else None) for r, a in zip(reps, df["answered"])]
    df["path_loss"] = [r.get("path_loss") for r in reps]
    df["series"] = [_LOSS_TOKEN.sub("", lab).strip() for lab in df["label"]]
    df["seconds"] = df["seconds"].astype(np.int64)
    for col in ("latency_mean_ms", "latency_p50_ms", "latency_p99_ms", "total_mean_ms", "total_p50_ms",
                "path_loss", "qps", "success_rate", "elapsed_s"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    return df[BENCH_COLUMNS]


# ----------------------------------------------------------------------------------
# What each resolver is (identity: QUIC libraries, DDR, connection policies, the
# amplification budget). A release without those tables (schema version 1, the 2021
# import) gives empty frames with the same columns.

def libraries_by_week(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    from .identity import NOT_IDENTIFIED
    stacks = "quic_stacks" if lake.has("quic_stacks") else \
        "(SELECT CAST(NULL AS BIGINT) AS run_id, CAST(NULL AS STRING) AS address, CAST(NULL AS INT) AS port, " \
        "CAST(NULL AS STRING) AS library WHERE FALSE)"
    df = lake.sql("WITH " + _verified(weeks, vantages) + f"""
        SELECT rep.iso_week, coalesce(q.library, {_lit(NOT_IDENTIFIED)}) AS library, count(*) AS resolvers
          FROM rep LEFT JOIN {stacks} q ON q.run_id = rep.run_id AND q.address = rep.address AND q.port = rep.port
         GROUP BY 1, 2 ORDER BY 1, 2""")
    return _ints(df, ["resolvers"])[["iso_week", "library", "resolvers"]]


def ddr_queries(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    cols = ["iso_week", "status", "responders"]
    if not lake.has("ddr_queries"):
        return pd.DataFrame(columns=cols)
    df = lake.sql(f"""
        SELECT iso_week, status, count(DISTINCT address) AS responders FROM ddr_queries
         WHERE {_in('iso_week', weeks)} AND {_in('vantage_id', vantages)}
         GROUP BY 1, 2 ORDER BY 1, 2""")
    return _ints(df, ["responders"])[cols]


def ddr_endpoints(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    from .identity import DOQ_ALPNS, SCANNED_PORTS
    cols = ["iso_week", "address", "port", "designated_by", "scanned", "outcome", "port_class"]
    if not lake.has("ddr_designations"):
        return pd.DataFrame(columns=cols)
    g = f"""(SELECT g.*, vr.scan_id FROM ddr_designations g JOIN verification_runs vr ON vr.run_id = g.run_id
              WHERE {_in('g.iso_week', weeks)} AND {_in('g.vantage_id', vantages)})"""
    doq = f"""(SELECT DISTINCT run_id, resolver, seq FROM {lake.explode('ddr_designations', 'alpns', 'alpn_')} a
                WHERE {_in('alpn_', DOQ_ALPNS)})"""
    hints = " UNION ALL ".join(
        f"SELECT iso_week, run_id, scan_id, resolver, seq, port, hint_ FROM {lake.explode(g, col, 'hint_')} h"
        for col in ("ipv4hints", "ipv6hints"))
    replies = ("(SELECT DISTINCT scan_id, address, port FROM scan_replies WHERE reply_kind = 'quic-vn')"
               if lake.has("scan_replies") else
               "(SELECT CAST(NULL AS BIGINT) AS scan_id, CAST(NULL AS STRING) AS address, CAST(NULL AS INT) AS port "
               "WHERE FALSE)")
    results = ("verification_results" if lake.has("verification_results") else
               "(SELECT CAST(NULL AS BIGINT) AS run_id, CAST(NULL AS STRING) AS address, CAST(NULL AS INT) AS port, "
               "CAST(NULL AS STRING) AS outcome WHERE FALSE)")
    df = lake.sql(f"""
        WITH d AS (SELECT h.iso_week, h.run_id, h.scan_id, h.hint_ AS address, coalesce(h.port, 853) AS port, h.resolver
                     FROM ({hints}) h JOIN {doq} q ON q.run_id = h.run_id AND q.resolver = h.resolver AND q.seq = h.seq)
        SELECT d.iso_week, d.address, d.port, count(DISTINCT d.resolver) AS designated_by,
               bool_or(s.address IS NOT NULL) AS scanned, min(r.outcome) AS outcome
          FROM d LEFT JOIN {replies} s ON s.scan_id = d.scan_id AND s.address = d.address AND s.port = d.port
          LEFT JOIN {results} r ON r.run_id = d.run_id AND r.address = d.address AND r.port = d.port
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""")
    df = _ints(df, ["port", "designated_by"])
    df["scanned"] = df["scanned"].astype(bool)
    df["outcome"] = df["outcome"].astype(object).where(df["outcome"].notna(), None)
    df["port_class"] = np.where(df["port"].isin(SCANNED_PORTS), "scanned port", "other port")
    return df[cols]


def _latest_policy_runs(weeks, vantages) -> str:
    """FROM-clause text: the newest check run of each week and vantage point."""
    return f"""(SELECT run_id, iso_week, vantage_id FROM (
                  SELECT run_id, iso_week, vantage_id,
                         row_number() OVER (PARTITION BY iso_week, vantage_id ORDER BY started_at DESC, run_id DESC) AS rn_
                    FROM policy_runs WHERE {_in('iso_week', weeks)} AND {_in('vantage_id', vantages)}) x WHERE rn_ = 1)"""


POLICY_COLUMNS = ["iso_week", "vantage_id", "address", "port", "protocol", "status", "queries_sent", "queries_answered",
                  "closed_by_server", "close_detail", "idle_advertised_ms", "idle_alive_ms", "idle_dead_ms",
                  "max_streams", "token_issued", "token_honoured", "token_honoured_for_ms", "token_refused_after_ms",
                  "retry_policy", "zero_rtt", "resumed", "ticket_lifetime_s"]


def policies(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    if not (lake.has("policy_runs") and lake.has("connection_policies")):
        return pd.DataFrame(columns=POLICY_COLUMNS)
    sel = ", ".join(f"p.{c}" for c in POLICY_COLUMNS[2:])
    return _plain(lake.sql(f"""
        SELECT runs.iso_week, runs.vantage_id, {sel}
          FROM connection_policies p JOIN {_latest_policy_runs(weeks, vantages)} runs ON runs.run_id = p.run_id
         ORDER BY 1, 2, 3, 4, 5"""))


def cold_and_warm(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    cols = ["address", "protocol", "cold_ms", "warm_ms", "queries"]
    if not lake.has("measurements"):
        return pd.DataFrame(columns=cols)
    f = LakeFacts(lake, weeks, vantages)
    rel = f"""(SELECT address, protocol, handshake_ns, resolve_ns FROM {f.ok} ok
                WHERE phase = 'measured' AND mode = 'fresh' AND {_in('protocol', names.COLD_WARM_PROTOCOLS)}
                  AND handshake_ns IS NOT NULL AND resolve_ns IS NOT NULL)"""
    base = lake.sql(f"SELECT address, protocol, count(*) AS queries FROM {rel} r GROUP BY 1, 2")
    if base.empty:
        return pd.DataFrame(columns=cols)
    # the order statistics of the integer nanoseconds, each median's two values then in ms
    # as CAST(ns AS DOUBLE) / 1e6 (the order is the same)
    cold, warm = "handshake_ns + resolve_ns", "resolve_ns"
    stats = order_statistics_of(lake, rel, ["address", "protocol"], [cold, warm], _median_ranks)
    keys = list(zip(base["address"], base["protocol"]))

    def ms(st):
        n, got = st
        return _median(n, {r: float(x) / 1e6 for r, x in got.items()})
    base["cold_ms"] = [ms(stats[cold][k]) for k in keys]
    base["warm_ms"] = [ms(stats[warm][k]) for k in keys]
    base = _ints(base, ["queries"])
    return base.sort_values(["address", "protocol"], kind="stable").reset_index(drop=True)[cols]


AMPLIFICATION_COLUMNS = ["iso_week", "vantage_id", "address", "port", "initial_size", "key_share", "chain_bytes",
                         "chain_certs", "client_bytes", "server_bytes_pre_ack", "budget", "stalled", "stall_ns",
                         "round_trips", "cause", "retry_seen"]


def amplification(lake: Lake, weeks=None, vantages=None) -> pd.DataFrame:
    if not (lake.has("policy_runs") and lake.has("amplification_probes")):
        return pd.DataFrame(columns=AMPLIFICATION_COLUMNS)
    sel = ", ".join(f"a.{c}" for c in AMPLIFICATION_COLUMNS[2:])
    return _plain(lake.sql(f"""
        SELECT runs.iso_week, runs.vantage_id, {sel}
          FROM amplification_probes a JOIN {_latest_policy_runs(weeks, vantages)} runs ON runs.run_id = a.run_id
         WHERE a.stalled IS NOT NULL
         ORDER BY 1, 2, 3, 4, 6, 5"""))
