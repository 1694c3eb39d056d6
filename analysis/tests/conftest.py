"""pytest fixtures: a fresh PostgreSQL database per test session, filled by the seeded
synthetic generator (doqscan_analysis.synth) from a known spec.

The server: $DOQSCAN_TEST_DATABASE_URL, else $DATABASE_URL, else the project's private
cluster (`bin/dbctl url`, built with `go build` when missing). The fixture creates
doqscan_pytest_<random>, applies the repository's schema.sql and migrations, and drops it afterwards.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "analysis"))

from doqscan_analysis import synth  # noqa: E402


def server_url() -> str:
    for var in ("DOQSCAN_TEST_DATABASE_URL", "DATABASE_URL"):
        if os.environ.get(var):
            return os.environ[var]
    dbctl = os.path.join(ROOT, "bin", "dbctl")
    if not os.access(dbctl, os.X_OK):
        subprocess.run(["go", "build", "-o", "bin/", "./cmd/dbctl"], cwd=ROOT, check=True)
    out = subprocess.run([dbctl, "url"], cwd=ROOT, check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def apply_schema(conn) -> None:
    """schema.sql, then every internal/store/migrations/NNNN_name.sql in order, each
    recorded in schema_migrations as store.Migrate records it: a Go tool that opens the
    database later finds it up to date and applies none of them again (an older
    migration run again after a newer one would narrow what the newer one widened)."""
    with open(os.path.join(ROOT, "schema.sql")) as f:
        conn.execute(f.read())
    done = [(1, "baseline schema.sql")]
    mig = os.path.join(ROOT, "internal", "store", "migrations")
    for name in sorted(n for n in os.listdir(mig) if re.fullmatch(r"[0-9]{4}_[a-z0-9_]+\.sql", n)):
        with open(os.path.join(mig, name)) as f:
            conn.execute(f.read())
        done.append((int(name[:4]), name[5:-4]))
    for version, label in done:
        conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s) ON CONFLICT (version) DO NOTHING",
                     (version, label))


@pytest.fixture(scope="session")
def fresh_db():
    """A factory: fresh_db() -> URL of a new empty database with schema.sql applied;
    every database it made is dropped at the end of the session."""
    base = server_url()
    made = []

    def make() -> str:
        name = f"doqscan_pytest_{secrets.token_hex(4)}"
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        url = make_conninfo(base, dbname=name)
        with psycopg.connect(url, autocommit=True) as c:
            apply_schema(c)
        return url

    yield make
    with psycopg.connect(base, autocommit=True) as c:
        for name in made:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def spec():
    return synth.default_spec(vantages=["synth-a", "synth-b"], hours=6,
                              key_shares=["x25519", "x25519mlkem768"])


@pytest.fixture(scope="session")
def synth_db(fresh_db, spec):
    """URL of a database filled from `spec`."""
    url = fresh_db()
    with psycopg.connect(url, autocommit=True) as c:
        synth.generate(c, spec)
    return url


@pytest.fixture()
def conn(synth_db):
    with psycopg.connect(synth_db, autocommit=True) as c:
        yield c
