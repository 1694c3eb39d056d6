"""The source every analysis function reads: a PostgreSQL connection (connect) or a
data release (lake.Lake), and the helpers the PostgreSQL side shares: one statement
into a DataFrame (_frame), the weeks/vantages filter parameters (_params), and the
decorator that hands a release to the lake function of the same name (_on_lake).
"""

from __future__ import annotations

import os

import pandas as pd
import psycopg

from . import db, lake


def _on_lake(fn):
    """Runs the lake function of the same name when the source is a release (lake.Lake)."""
    import functools

    @functools.wraps(fn)
    def run(conn, *args, **kwargs):
        if isinstance(conn, lake.Lake):
            return getattr(lake, fn.__name__)(conn, *args, **kwargs)
        if isinstance(kwargs.get("facts"), lake.LakeFacts):
            raise TypeError("facts from a release given with a PostgreSQL connection")
        return fn(conn, *args, **kwargs)
    return run


def connect(url: str, work_mem: str = "128MB", engine: str = "duckdb", master: str | None = None,
            memory_limit: str | None = None):
    """The source every function here reads: a release directory (dataset export's
    Parquet files, docs/data-release.md) gives a lake.Lake whose aggregations run in SQL
    on `engine` (duckdb, or spark with `master`, default local[2]); anything else is a
    PostgreSQL URL and gives an autocommit connection (a failed query does not poison
    later ones) whose sorts get `work_mem` each: the distributions sort every measurement
    once per metric, and in-memory sorts are several times faster than PostgreSQL's
    default 4 MB spills."""
    if lake.is_release(url):
        return lake.Lake(url, engine=engine, master=master, memory_limit=memory_limit)
    if os.path.isdir(str(url)):
        raise ValueError(f"{url}: a directory without manifest.json is not a release (dataset export writes one)")
    conn = psycopg.connect(url, autocommit=True)
    # JIT compilation costs seconds per query (20 s of doq_causes' 41 s on the 10 M
    # bench) and pays off on none of these one-pass aggregations.
    conn.execute("SET jit = off")
    if work_mem:
        conn.execute("SELECT set_config('work_mem', %s, false)", (work_mem,))
    return conn


def default_source(source: str | None = None) -> str:
    """The source to read: `source` (a release directory or a PostgreSQL URL), else
    $DATABASE_URL, else the private cluster's URL (bin/dbctl url)."""
    if source:
        return source
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    return db.dbctl_url()


def describe(conn) -> str:
    """What a connection reads, for the notebooks' first lines (no password)."""
    if isinstance(conn, lake.Lake):
        return f"release {conn.path} (schema version {conn.manifest.get('schema_version')}) on {conn.engine}"
    info = conn.info
    return f"PostgreSQL database {info.dbname} on {info.host}"


def _frame(conn: psycopg.Connection, sql: str, params: dict | None = None) -> pd.DataFrame:
    with conn.cursor() as cur:
        cur.execute(sql, params or {})
        cols = [d.name for d in cur.description]
        return pd.DataFrame(cur.fetchall(), columns=cols)


def _params(weeks, vantages, **extra) -> dict:
    p = {
        "weeks": list(weeks) if weeks else None,
        "vantages": list(vantages) if vantages else None,
    }
    p.update(extra)
    return p


def _has(conn, table: str) -> bool:
    return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0])
