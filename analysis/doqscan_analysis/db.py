"""PostgreSQL for the analysis, its tests and its benchmarks: where the server is, and
the repository's schema applied to a new database.

    url = server_url()             # $DOQSCAN_TEST_DATABASE_URL, $DATABASE_URL or `bin/dbctl url`
    with psycopg.connect(url, autocommit=True) as c:
        apply_schema(c)            # schema.sql and internal/store/migrations, recorded as store.Migrate does

The package is installed editable from the repository's analysis/ folder (./dev
install), so the repository's files are found next to it: REPO.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

# The repository this package sits in (installed editable from analysis/).
REPO = Path(__file__).resolve().parents[2]
DBCTL = REPO / "bin" / "dbctl"
SCHEMA = REPO / "schema.sql"
MIGRATIONS = REPO / "internal" / "store" / "migrations"


def dbctl_url(build: bool = False) -> str:
    """The private cluster's URL (`bin/dbctl url`, which starts the cluster when it is
    not running); with `build`, bin/dbctl is built first when missing."""
    if build and not os.access(DBCTL, os.X_OK):
        subprocess.run(["go", "build", "-o", "bin/", "./cmd/dbctl"], cwd=REPO, check=True)
    out = subprocess.run([str(DBCTL), "url"], cwd=REPO, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def server_url() -> str:
    """The server tests and benchmarks create their databases on:
    $DOQSCAN_TEST_DATABASE_URL, else $DATABASE_URL, else the project's private cluster
    (`bin/dbctl url`, built with `go build` when missing)."""
    for var in ("DOQSCAN_TEST_DATABASE_URL", "DATABASE_URL"):
        if os.environ.get(var):
            return os.environ[var]
    return dbctl_url(build=True)


def apply_schema(conn) -> None:
    """schema.sql, then every internal/store/migrations/NNNN_name.sql in order, each
    recorded in schema_migrations as store.Migrate records it: a Go tool that opens the
    database later finds it up to date and applies none of them again (an older
    migration run again after a newer one would narrow what the newer one widened)."""
    conn.execute(SCHEMA.read_text())
    done = [(1, "baseline schema.sql")]
    for name in sorted(n for n in os.listdir(MIGRATIONS) if re.fullmatch(r"[0-9]{4}_[a-z0-9_]+\.sql", n)):
        conn.execute((MIGRATIONS / name).read_text())
        done.append((int(name[:4]), name[5:-4]))
    for version, label in done:
        conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s) ON CONFLICT (version) DO NOTHING",
                     (version, label))
