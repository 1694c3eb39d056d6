"""Load aggregated results from doqscan's PostgreSQL database (schema.sql).

Most functions run one SQL statement that aggregates inside PostgreSQL and return a
small pandas DataFrame: counts per week, per version pair, per port. The response-time
functions (answering, response_times) share measurement_facts: one binary COPY of a
compact record per successful measurement, paired with its RTT in PostgreSQL, from
which numpy computes exact distributions (order statistics at fixed ranks, medians,
means), the DoX set and per-group resolver counts (~46 bytes a measurement in memory).

Filters common to all functions:
  weeks     list of ISO weeks ('2026-W47'); None = every week in the database.
  vantages  list of vantage_id; None = all vantage points.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import psycopg

from . import db, lake, names


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

# Order in which a resolver's DoQ port decides its version pair when it answers on
# several ports (names.PORT_PREFERENCE).
PORT_PREFERENCE = names.PORT_PREFERENCE

# verification_results.port of a resolver whose source did not record the port it
# answered on (imported lists: the pre-study's verifier tried 784 then 8853 and kept only
# the address; migration 0006). Port figures leave these out and say how many they are.
PORT_UNKNOWN = 0

# Outcomes of verification_results that count as a DoQ-verified resolver (the study's
# "DoQ-verified": DoQ ALPN negotiated and a DNS answer received).
VERIFIED = "doq-verified"

# DNS rcodes that make a UDP/53 scan reply a working DoUDP resolver: NOERROR (0) and
# NXDOMAIN (3) (RFC 1035 §4.1.1); REFUSED and SERVFAIL do not count.
DOUDP_RCODES = [0, 3]

DEFAULT_POINTS = 2000  # ranks at which distributions are returned (ECDF step <= 1/2000)

# Connections measurement_facts may use at once (one scan per core; the machine has 2).
PARALLEL = int(os.environ.get("DOQSCAN_ANALYSIS_PARALLEL", "2"))


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


# A resolver is verified in a week when any vantage point's verification run of that
# week verified it.
_VERIFIED_CTE = """
verified AS (
    SELECT vr.iso_week, vr.vantage_id, vr.scan_id, vr.city_dataset, vr.asn_dataset,
           r.address, r.port, r.alpn, r.quic_version, r.cert_chain, r.scan_versions
      FROM verification_results r
      JOIN verification_runs vr USING (run_id)
     WHERE r.outcome = 'doq-verified'
       AND (%(weeks)s::text[] IS NULL OR vr.iso_week = ANY(%(weeks)s::text[]))
       AND (%(vantages)s::text[] IS NULL OR vr.vantage_id = ANY(%(vantages)s::text[]))
),
rep AS (  -- one row per (week, resolver): its preferred DoQ port decides the pair
    SELECT DISTINCT ON (iso_week, address) *
      FROM verified
     ORDER BY iso_week, address,
              """ + names.sql_port_rank("port") + """, port, vantage_id
)
"""


@_on_lake
def weeks(conn, vantages=None) -> list[str]:
    """ISO weeks that have a verification run or a campaign, in order."""
    df = _frame(conn, """
        SELECT iso_week FROM verification_runs
         WHERE %(vantages)s::text[] IS NULL OR vantage_id = ANY(%(vantages)s::text[])
        UNION
        SELECT to_char(round_hour, 'IYYY-"W"IW') FROM campaigns
         WHERE %(vantages)s::text[] IS NULL OR vantage_id = ANY(%(vantages)s::text[])
        ORDER BY 1""", _params(None, vantages))
    return df["iso_week"].tolist()


@_on_lake
def vantage_points(conn) -> pd.DataFrame:
    """vantage_id, description, country, latitude, longitude, location (free text, ''
    when the database predates it) of every vantage point."""
    df = _frame(conn, "SELECT * FROM vantage_points ORDER BY vantage_id")
    return df.reindex(columns=VANTAGE_COLUMNS).assign(location=lambda d: d["location"].fillna(""))


VANTAGE_COLUMNS = ["vantage_id", "description", "country", "latitude", "longitude", "location"]


def _has(conn, table: str) -> bool:
    return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0])


@_on_lake
def datasets(conn) -> pd.DataFrame:
    """External datasets (GeoIP builds, imported study files) with build date and hash,
    for the report's provenance; imports also name their vantage point, label and source
    directory (migration 0006)."""
    extra = (", vantage_id, label, source" if _has(conn, "dataset_files") else "")
    return _frame(conn, f"""SELECT dataset_id, kind, database_type, build_time,
                                  encode(sha256, 'hex') AS sha256, path{extra}
                             FROM datasets ORDER BY kind, build_time""")


PROVENANCE_COLUMNS = ["stage", "run", "key", "vantage_id", "label", "tool", "version", "revision",
                      "modified", "host", "location", "contact", "zmap", "probes", "geoip", "records"]


@_on_lake
def provenance(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """What produced each scan, verification run and measurement round (migration 0008):
    one row per run, from the newest of its provenance records (`records` says how many
    builds wrote the row; more than one: a run resumed by another build). Columns:
    stage (scan | verify | measure), run (its id), key (ISO week or round hour),
    vantage_id, label, tool, version, revision (12 hex digits, or "unknown"), modified,
    host, location, contact (the vantage point's), zmap (its version), probes ("kind
    sha256[:12]" per probe), geoip ("kind build-date" per database), records. Rows
    written before provenance was recorded have records 0 and empty fields."""
    cols = conn.execute("""SELECT count(*) FROM information_schema.columns
                            WHERE table_name = 'scans' AND column_name = 'provenance'""").fetchone()[0]
    if not cols:
        return pd.DataFrame(columns=PROVENANCE_COLUMNS)
    df = _frame(conn, """
        WITH runs AS (
          SELECT 'scan' AS stage, scan_id AS run, iso_week || CASE WHEN shards > 1 THEN ' shard ' || shard ELSE '' END AS key,
                 iso_week AS week, vantage_id, label, provenance FROM scans
          UNION ALL
          SELECT 'verify', run_id, iso_week, iso_week, vantage_id, label, provenance FROM verification_runs
          UNION ALL
          SELECT 'measure', campaign_id, to_char(round_hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24"Z"'),
                 to_char(round_hour, 'IYYY-"W"IW'), vantage_id, label, provenance FROM campaigns)
        SELECT stage, run, key, vantage_id, label,
               coalesce(p->>'tool', '') AS tool,
               coalesce(p->'build'->>'version', '') AS version,
               left(coalesce(p->'build'->>'revision', ''), 12) AS revision,
               coalesce((p->'build'->>'modified')::boolean, false) AS modified,
               coalesce(p->>'host', '') AS host,
               coalesce(p->'vantage'->>'location', '') AS location,
               coalesce(p->'vantage'->>'contact', '') AS contact,
               coalesce(p->'zmap'->>'version', '') AS zmap,
               coalesce((SELECT string_agg((e->>'kind') || ' ' || left(e->>'sha256', 12), ', ')
                           FROM jsonb_array_elements(coalesce(p->'probes', '[]')) e), '') AS probes,
               coalesce((SELECT string_agg((e->>'kind') || ' ' || left(e->>'build_time', 10), ', ')
                           FROM jsonb_array_elements(coalesce(p->'geoip', '[]')) e), '') AS geoip,
               records
          FROM (SELECT *, provenance->-1 AS p, jsonb_array_length(provenance) AS records FROM runs) r
         WHERE (%(weeks)s::text[] IS NULL OR week = ANY(%(weeks)s::text[]))
           AND (%(vantages)s::text[] IS NULL OR vantage_id = ANY(%(vantages)s::text[]))
         ORDER BY key, CASE stage WHEN 'scan' THEN 0 WHEN 'verify' THEN 1 ELSE 2 END, vantage_id, label, run""",
        _params(weeks, vantages))
    return df[PROVENANCE_COLUMNS] if len(df) else pd.DataFrame(columns=PROVENANCE_COLUMNS)


@_on_lake
def sources(conn, vantages=None) -> pd.DataFrame:
    """Where the data comes from, one row per vantage point and label: scan and
    verification weeks, verified resolvers per week (mean), measurement rounds and
    measurements, and the imported dataset behind the label if any. Columns vantage_id,
    label, weeks, first_week, last_week, verified_per_week, campaigns, measurements,
    imported_from."""
    imp = ("""LEFT JOIN (SELECT DISTINCT ON (vantage_id, label) vantage_id, label, source
                          FROM datasets WHERE kind = 'import' ORDER BY vantage_id, label, dataset_id DESC) d
                   USING (vantage_id, label)""" if _has(conn, "dataset_files") else
           "LEFT JOIN (SELECT NULL::text AS vantage_id, NULL::text AS label, NULL::text AS source) d USING (vantage_id, label)")
    return _frame(conn, """
        WITH v AS (SELECT vr.vantage_id, vr.label, vr.iso_week,
                          (SELECT count(DISTINCT r.address) FROM verification_results r
                            WHERE r.run_id = vr.run_id AND r.outcome = 'doq-verified') AS verified
                     FROM verification_runs vr
                    WHERE %(vantages)s::text[] IS NULL OR vr.vantage_id = ANY(%(vantages)s::text[])),
             vv AS (SELECT vantage_id, label, count(*) AS weeks, min(iso_week) AS first_week,
                           max(iso_week) AS last_week, avg(verified) AS verified_per_week
                      FROM v GROUP BY 1, 2),
             cc AS (SELECT c.vantage_id, c.label, count(*) AS campaigns,
                           sum((SELECT count(*) FROM measurements m WHERE m.campaign_id = c.campaign_id)) AS measurements
                      FROM campaigns c
                     WHERE %(vantages)s::text[] IS NULL OR c.vantage_id = ANY(%(vantages)s::text[])
                     GROUP BY 1, 2)
        SELECT vantage_id, label, COALESCE(vv.weeks, 0) AS weeks, vv.first_week, vv.last_week,
               round(vv.verified_per_week, 1)::float8 AS verified_per_week,
               COALESCE(cc.campaigns, 0) AS campaigns, COALESCE(cc.measurements, 0)::bigint AS measurements,
               d.source AS imported_from
          FROM vv FULL JOIN cc USING (vantage_id, label) """ + imp + """
         ORDER BY 1, 2""", _params(None, vantages))


@_on_lake
def verification_outcomes(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """Verified QUIC endpoints per week and outcome, every class of
    verification_results.outcome (verify.Outcomes): how many hosts are DoQ resolvers,
    how many speak QUIC but not DoQ, how many answer DNS over QUIC only without ALPN
    (doq-no-alpn, not counted as resolvers elsewhere), and so on. Columns iso_week,
    outcome, endpoints ((address, port) results) and addresses (distinct addresses)."""
    return _frame(conn, """
        SELECT vr.iso_week, r.outcome, count(*) AS endpoints, count(DISTINCT r.address) AS addresses
          FROM verification_results r
          JOIN verification_runs vr USING (run_id)
         WHERE (%(weeks)s::text[] IS NULL OR vr.iso_week = ANY(%(weeks)s::text[]))
           AND (%(vantages)s::text[] IS NULL OR vr.vantage_id = ANY(%(vantages)s::text[]))
         GROUP BY 1, 2 ORDER BY 1, 2""", _params(weeks, vantages))


@_on_lake
def verified_by_pair(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """DoQ-verified resolvers per week and DoQ/QUIC version pair (the study's Fig. 1).

    Columns iso_week, alpn, quic_version, resolvers, pair (a readable label). A resolver
    (address) counts once per week, under the pair of its preferred port
    (PORT_PREFERENCE)."""
    df = _frame(conn, "WITH " + _VERIFIED_CTE + """
        SELECT iso_week, alpn, quic_version, count(*) AS resolvers
          FROM rep GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""", _params(weeks, vantages))
    df["pair"] = [names.pair_name(a, v) for a, v in zip(df["alpn"], df["quic_version"])]
    return df


@_on_lake
def verified_by_family(conn, weeks=None, vantages=None, siblings=None) -> pd.DataFrame:
    """DoQ-verified resolvers per week and address family, and the resolvers counted
    across both families without counting a dual-stack server twice.

    siblings: declared dual-stack pairs, a DataFrame (or iterable of pairs) with columns
    address4, address6 (e.g. the operator's list, or the testbed population's twin=). A
    pair merges into one resolver in a week only when both addresses are DoQ-verified
    that week AND present the same leaf certificate (one server, one certificate): a
    stale or wrong declaration never merges two servers.

    Columns iso_week, ipv4, ipv6 (verified addresses of each family), dual_stack (pairs
    merged), resolvers (= ipv4 + ipv6 - dual_stack), shared_cert_unpaired (IPv6
    addresses not merged whose leaf certificate some verified IPv4 address of the week
    also presents: possibly the same server, counted twice unless declared; shared
    certificates alone do not decide it, as one provider's certificate covers many
    servers)."""
    pairs = _sibling_pairs(siblings)
    return _frame(conn, "WITH " + _VERIFIED_CTE + """,
        leaf AS (SELECT DISTINCT iso_week, address, cert_chain[1] AS leaf FROM verified),
        fam AS (SELECT iso_week, count(DISTINCT address) FILTER (WHERE family(address) = 4) AS ipv4,
                       count(DISTINCT address) FILTER (WHERE family(address) = 6) AS ipv6
                  FROM verified GROUP BY 1),
        declared AS (SELECT a4::inet AS address4, a6::inet AS address6
                       FROM unnest(%(sib4)s::text[], %(sib6)s::text[]) AS d(a4, a6)),
        merged AS (SELECT DISTINCT l4.iso_week, d.address4, d.address6
                     FROM declared d
                     JOIN leaf l4 ON l4.address = d.address4
                     JOIN leaf l6 ON l6.address = d.address6 AND l6.iso_week = l4.iso_week
                    WHERE l4.leaf = l6.leaf),
        dual AS (SELECT iso_week, count(*) AS dual_stack FROM merged GROUP BY 1),
        unpaired AS (SELECT l6.iso_week, count(DISTINCT l6.address) AS shared_cert_unpaired
                       FROM leaf l6 JOIN leaf l4 ON l4.iso_week = l6.iso_week AND l4.leaf = l6.leaf
                      WHERE family(l6.address) = 6 AND family(l4.address) = 4
                        AND NOT EXISTS (SELECT 1 FROM merged m
                                         WHERE m.iso_week = l6.iso_week AND m.address6 = l6.address)
                      GROUP BY 1)
        SELECT f.iso_week, f.ipv4, f.ipv6, COALESCE(d.dual_stack, 0) AS dual_stack,
               f.ipv4 + f.ipv6 - COALESCE(d.dual_stack, 0) AS resolvers,
               COALESCE(u.shared_cert_unpaired, 0) AS shared_cert_unpaired
          FROM fam f LEFT JOIN dual d USING (iso_week) LEFT JOIN unpaired u USING (iso_week)
         ORDER BY 1""", _params(weeks, vantages, sib4=[a for a, _ in pairs], sib6=[b for _, b in pairs]))


def read_siblings(path: str) -> pd.DataFrame:
    """Declared dual-stack pairs from a CSV file: columns address4,address6 (header
    line), '#' comments allowed. Empty path: no pairs (an empty frame)."""
    if not path:
        return pd.DataFrame(columns=["address4", "address6"])
    df = pd.read_csv(path, comment="#", dtype=str, skipinitialspace=True)
    missing = {"address4", "address6"} - set(df.columns)
    if missing:
        raise ValueError(f"{path}: missing columns {sorted(missing)} (want address4,address6)")
    _sibling_pairs(df)  # refuses a pair of the wrong families
    return df[["address4", "address6"]]


def _sibling_pairs(siblings) -> list[tuple[str, str]]:
    """(IPv4, IPv6) address pairs from a DataFrame with address4/address6 or an iterable
    of pairs; a pair whose families are not IPv4 then IPv6 is refused (ValueError)."""
    import ipaddress
    if siblings is None:
        return []
    if isinstance(siblings, pd.DataFrame):
        siblings = zip(siblings["address4"], siblings["address6"])
    out = []
    for a4, a6 in siblings:
        v4, v6 = ipaddress.ip_address(str(a4)), ipaddress.ip_address(str(a6))
        if v4.version != 4 or v6.version != 6:
            raise ValueError(f"dual-stack pair ({a4}, {a6}): want an IPv4 then an IPv6 address")
        out.append((str(v4), str(v6)))
    return out


@_on_lake
def port_shares(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """Per week and port: resolvers verified on that port, and their share of all
    verified resolvers of the week (shares add up to more than 1 when resolvers answer
    on several ports). Columns iso_week, port, resolvers, total, share."""
    df = _frame(conn, "WITH " + _VERIFIED_CTE + """,
        per_port AS (SELECT iso_week, port, count(DISTINCT address) AS resolvers
                       FROM verified WHERE port <> %(unknown)s GROUP BY 1, 2),
        total AS (SELECT iso_week, count(*) AS total FROM rep GROUP BY 1)
        SELECT p.iso_week, p.port, p.resolvers, t.total
          FROM per_port p JOIN total t USING (iso_week) ORDER BY 1, 2""",
                _params(weeks, vantages, unknown=PORT_UNKNOWN))
    df["share"] = df["resolvers"] / df["total"]
    return df


@_on_lake
def ports_not_recorded(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """Per week with verified resolvers whose port the source did not record (port
    PORT_UNKNOWN and no row with a known port): how many they are of all verified, and on
    which of the verifier's ports (784, 8853) the week's scan saw them. A fact, not a
    guess at the port they verified on. Columns iso_week, total, not_recorded,
    scan_784_only, scan_8853_only, scan_both, scan_neither."""
    return _frame(conn, "WITH " + _VERIFIED_CTE + """,
        total AS (SELECT iso_week, count(*) AS total FROM rep GROUP BY 1),
        unk AS (SELECT iso_week, address, array_agg(DISTINCT scan_id) AS scans FROM verified
                 GROUP BY 1, 2 HAVING bool_and(port = %(unknown)s)),
        sp AS (SELECT u.iso_week, u.address,
                      bool_or(s.port = 784) AS a, bool_or(s.port = 8853) AS b
                 FROM unk u LEFT JOIN scan_replies s ON s.scan_id = ANY(u.scans) AND s.address = u.address
                GROUP BY 1, 2)
        SELECT sp.iso_week, t.total, count(*) AS not_recorded,
               count(*) FILTER (WHERE a AND NOT b) AS scan_784_only,
               count(*) FILTER (WHERE b AND NOT a) AS scan_8853_only,
               count(*) FILTER (WHERE a AND b) AS scan_both,
               count(*) FILTER (WHERE a IS NOT TRUE AND b IS NOT TRUE) AS scan_neither
          FROM sp JOIN total t USING (iso_week) GROUP BY 1, 2 ORDER BY 1""",
                  _params(weeks, vantages, unknown=PORT_UNKNOWN))


_FINGERPRINT_SQL = """(SELECT string_agg(CASE WHEN (v & 252645135) = 168430090 THEN 'grease'
                                             ELSE v::text END, ',' ORDER BY o)
                         FROM unnest({col}) WITH ORDINALITY AS u(v, o))"""


def _fp_label(fp: str | None) -> str:
    if names.missing(fp):
        return "no VN list"
    out = []
    for tok in fp.split(","):
        out.append("grease" if tok == "grease" else names.quic_version_short(int(tok)))
    return ", ".join(out)


@_on_lake
def scan_versions(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """QUIC versions advertised in the scans' Version Negotiation replies: per week and
    version, the number of addresses listing it (grease values folded into 'grease').
    Columns iso_week, version, version_name, addresses, vn_addresses (all valid VN
    repliers of the week)."""
    df = _frame(conn, """
        WITH vn AS (
            SELECT DISTINCT s.iso_week, r.address, r.quic_versions
              FROM scan_replies r JOIN scans s USING (scan_id)
             WHERE r.reply_kind = 'quic-vn'
               AND (%(weeks)s::text[] IS NULL OR s.iso_week = ANY(%(weeks)s::text[]))
               AND (%(vantages)s::text[] IS NULL OR s.vantage_id = ANY(%(vantages)s::text[]))),
        tot AS (SELECT iso_week, count(DISTINCT address) AS vn_addresses FROM vn GROUP BY 1)
        SELECT vn.iso_week,
               CASE WHEN (v & 252645135) = 168430090 THEN -1 ELSE v END AS version,
               count(DISTINCT vn.address) AS addresses, t.vn_addresses
          FROM vn CROSS JOIN LATERAL unnest(vn.quic_versions) AS v
          JOIN tot t USING (iso_week)
         GROUP BY 1, 2, 4 ORDER BY 1, 3 DESC""", _params(weeks, vantages))
    df["version_name"] = [("grease" if v == -1 else names.quic_version_name(v)) for v in df["version"]]
    return df


@_on_lake
def stack_fingerprints(conn, weeks=None, vantages=None, verified_only=True) -> pd.DataFrame:
    """Stack fingerprints: the advertised VN version list (in packet order, grease as a
    token) per week, counted over DoQ-verified resolvers (verified_only) or over every
    address that sent a valid VN. Columns iso_week, fingerprint, addresses."""
    if verified_only:
        sql = "WITH " + _VERIFIED_CTE + """,
            fp AS (
                SELECT rep.iso_week, rep.address,
                       """ + _FINGERPRINT_SQL.format(col="COALESCE(rep.scan_versions, sr.quic_versions)") + """ AS fp
                  FROM rep LEFT JOIN scan_replies sr
                    ON sr.scan_id = rep.scan_id AND sr.port = rep.port AND sr.address = rep.address)
            SELECT iso_week, fp AS fingerprint, count(*) AS addresses FROM fp GROUP BY 1, 2 ORDER BY 1, 3 DESC"""
    else:
        sql = """
            WITH fp AS (
                SELECT DISTINCT ON (s.iso_week, r.address) s.iso_week, r.address,
                       """ + _FINGERPRINT_SQL.format(col="r.quic_versions") + """ AS fp
                  FROM scan_replies r JOIN scans s USING (scan_id)
                 WHERE r.reply_kind = 'quic-vn'
                   AND (%(weeks)s::text[] IS NULL OR s.iso_week = ANY(%(weeks)s::text[]))
                   AND (%(vantages)s::text[] IS NULL OR s.vantage_id = ANY(%(vantages)s::text[]))
                 ORDER BY s.iso_week, r.address, r.port)
            SELECT iso_week, fp AS fingerprint, count(*) AS addresses FROM fp GROUP BY 1, 2 ORDER BY 1, 3 DESC"""
    df = _frame(conn, sql, _params(weeks, vantages))
    df["fingerprint"] = [_fp_label(f) for f in df["fingerprint"]]
    return df


def _leaf_sql(conn, src: str) -> str:
    """Each row of `src` (verified or rep) with its leaf certificate's subject CN and
    identity: the verified chain's leaf (certificates), else, for rows without a chain
    (imported lists), the QUIC leaf the same source recorded for the address in the same
    week (observed_certificates, migration 0006; on the row's port, or when the port was
    not recorded on 853, 784, 8853 in that order). Identity: 'sha256:<hex>' or 'md5:<hex>'."""
    if not _has(conn, "observed_certificates"):
        return f"""SELECT {src}.*, c.subject_cn, 'sha256:' || encode({src}.cert_chain[1], 'hex') AS leaf
                     FROM {src} LEFT JOIN certificates c ON c.sha256 = {src}.cert_chain[1]"""
    return f"""SELECT {src}.*, COALESCE(c.subject_cn, o.subject_cn) AS subject_cn,
                      COALESCE('sha256:' || encode({src}.cert_chain[1], 'hex'),
                               'sha256:' || encode(o.sha256, 'hex'), 'md5:' || encode(o.md5, 'hex')) AS leaf
                 FROM {src} LEFT JOIN certificates c ON c.sha256 = {src}.cert_chain[1]
                 LEFT JOIN LATERAL (
                      SELECT o.subject_cn, o.sha256, o.md5 FROM observed_certificates o
                       WHERE {src}.cert_chain IS NULL AND o.address = {src}.address
                         AND o.iso_week = {src}.iso_week AND o.vantage_id = {src}.vantage_id
                         AND o.protocol = 'quic' AND ({src}.port = {PORT_UNKNOWN} OR o.port = {src}.port)
                       ORDER BY {names.sql_port_rank('o.port')}, o.port LIMIT 1) o ON true"""


@_on_lake
def top_providers(conn, weeks=None, vantages=None, top: int = 10) -> pd.DataFrame:
    """Resolvers per week by the subject CN of their leaf certificate (_leaf_sql: the
    verified chain's, or the one an imported source recorded); the `top` CNs over all
    selected weeks by total, the rest as 'other'. Columns iso_week, subject_cn, resolvers."""
    df = _frame(conn, "WITH " + _VERIFIED_CTE + """,
        cn AS (SELECT iso_week, COALESCE(NULLIF(subject_cn, ''), '(no CN)') AS subject_cn
                 FROM (""" + _leaf_sql(conn, "rep") + """) l)
        SELECT iso_week, subject_cn, count(*) AS resolvers FROM cn GROUP BY 1, 2 ORDER BY 1, 3 DESC""",
                _params(weeks, vantages))
    if df.empty:
        return df
    order = df.groupby("subject_cn")["resolvers"].sum().sort_values(ascending=False)
    keep = set(order.index[:top])
    df["subject_cn"] = [c if c in keep else "other" for c in df["subject_cn"]]
    return df.groupby(["iso_week", "subject_cn"], as_index=False)["resolvers"].sum()


@_on_lake
def certificate_counts(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """Unique leaf certificates per week and over the whole selection (iso_week 'all'),
    identified as _leaf_sql says (an imported source's certificates by their MD5)."""
    return _frame(conn, "WITH " + _VERIFIED_CTE + """
        SELECT COALESCE(iso_week, 'all') AS iso_week, count(DISTINCT leaf) AS certificates,
               count(DISTINCT address) AS resolvers
          FROM (""" + _leaf_sql(conn, "verified") + """) l
         GROUP BY GROUPING SETS ((iso_week), ()) ORDER BY 1""", _params(weeks, vantages))


_CHURN_SQL = """,
    s AS (SELECT DISTINCT iso_week, address FROM members),
    w AS (SELECT iso_week, row_number() OVER (ORDER BY iso_week) AS i
            FROM (SELECT DISTINCT iso_week FROM s) x),
    sw AS (SELECT s.address, w.iso_week, w.i FROM s JOIN w USING (iso_week))
    SELECT a.iso_week, a.i AS week_index, count(*) AS total,
           count(p.address) AS kept_from_previous,
           count(f.address) AS kept_from_first
      FROM sw a
      LEFT JOIN sw p ON p.address = a.address AND p.i = a.i - 1
      LEFT JOIN sw f ON f.address = a.address AND f.i = 1
     GROUP BY a.iso_week, a.i ORDER BY a.i"""


@_on_lake
def membership_by_week(conn, kind: str = "doq", weeks=None, vantages=None) -> pd.DataFrame:
    """Week-over-week membership counts of the resolver set `kind`:
    'doq' = DoQ-verified addresses; 'doudp' = addresses whose UDP/53 scan reply was a
    DNS answer with rcode NOERROR/NXDOMAIN. Columns iso_week, week_index, total,
    kept_from_previous, kept_from_first (see stats.churn for the derived shares)."""
    if kind == "doq":
        sql = "WITH " + _VERIFIED_CTE + ", members AS (SELECT iso_week, address FROM verified)" + _CHURN_SQL
    elif kind == "doudp":
        sql = """WITH members AS (
            SELECT s.iso_week, r.address FROM scan_replies r JOIN scans s USING (scan_id)
             WHERE r.port = 53 AND r.reply_kind = 'dns' AND r.dns_rcode = ANY(%(rcodes)s::smallint[])
               AND (%(weeks)s::text[] IS NULL OR s.iso_week = ANY(%(weeks)s::text[]))
               AND (%(vantages)s::text[] IS NULL OR s.vantage_id = ANY(%(vantages)s::text[])))""" + _CHURN_SQL
    else:
        raise ValueError(f"membership kind {kind!r}: want 'doq' or 'doudp'")
    return _frame(conn, sql, _params(weeks, vantages, rcodes=DOUDP_RCODES))


_GEO_CTE = """,
    wk AS (SELECT COALESCE(%(week)s::text, max(iso_week)) AS iso_week FROM rep),
    sel AS (SELECT rep.* FROM rep JOIN wk USING (iso_week)),
    geo AS (
        SELECT sel.address, g.*
          FROM sel LEFT JOIN LATERAL (
                SELECT g.asn, g.as_org, g.country, g.continent, g.city, g.latitude, g.longitude
                  FROM resolver_geo g JOIN datasets d ON d.dataset_id = g.city_dataset
                 WHERE g.address = sel.address
                 ORDER BY (g.city_dataset = sel.city_dataset AND g.asn_dataset = sel.asn_dataset) DESC NULLS LAST,
                          d.build_time DESC
                 LIMIT 1) g ON true)
"""


@_on_lake
def geo_counts(conn, by: str, week: str | None = None, vantages=None) -> pd.DataFrame:
    """DoQ-verified resolvers of one week (default: the latest) by 'continent',
    'country' or 'asn' (with as_org). Unknown locations count as '??'. Columns <by>
    [as_org], resolvers, share."""
    if by == "asn":
        sel = "COALESCE(asn::text, '??') AS asn, COALESCE(max(as_org), '') AS as_org"
        grp = "1"
    elif by in ("continent", "country"):
        sel = f"COALESCE({by}, '??') AS {by}"
        grp = "1"
    else:
        raise ValueError(f"geo_counts by {by!r}: want continent, country or asn")
    df = _frame(conn, "WITH " + _VERIFIED_CTE + _GEO_CTE + f"""
        SELECT {sel}, count(*) AS resolvers FROM geo GROUP BY {grp} ORDER BY resolvers DESC, 1""",
                _params(None, vantages, week=week))
    df["share"] = df["resolvers"] / df["resolvers"].sum() if len(df) else []
    return df


@_on_lake
def geo_points(conn, week: str | None = None, vantages=None, grid_deg: float = 0.5) -> pd.DataFrame:
    """Resolver locations of one week, snapped to a grid of `grid_deg` degrees, with the
    number of resolvers per cell. Columns latitude, longitude, resolvers."""
    return _frame(conn, "WITH " + _VERIFIED_CTE + _GEO_CTE + """
        SELECT round(latitude / %(grid)s) * %(grid)s AS latitude,
               round(longitude / %(grid)s) * %(grid)s AS longitude, count(*) AS resolvers
          FROM geo WHERE latitude IS NOT NULL AND longitude IS NOT NULL
         GROUP BY 1, 2 ORDER BY 3 DESC""", _params(None, vantages, week=week, grid=grid_deg))


# ----------------------------------------------------------------------------------
# Response times.

_CAMPAIGNS_CTE = """
c AS (SELECT campaign_id, vantage_id, status, finished_at, to_char(round_hour, 'IYYY-"W"IW') AS iso_week
        FROM campaigns
       WHERE (%(weeks)s::text[] IS NULL OR to_char(round_hour, 'IYYY-"W"IW') = ANY(%(weeks)s::text[]))
         AND (%(vantages)s::text[] IS NULL OR vantage_id = ANY(%(vantages)s::text[]))),
ok AS NOT MATERIALIZED (  -- successful measurements: a DNS response with an rcode (the study's filter)
    -- narrow and re-scanned by each user: materializing 10 M whole rows spilled to disk
    SELECT c.vantage_id, m.campaign_id, m.address, m.protocol, m.port, m.phase, m.mode, m.key_share,
           m.resolve_ns, m.handshake_ns
      FROM measurements m JOIN c USING (campaign_id)
     WHERE m.status = 'ok' AND m.rcode IS NOT NULL),
dox AS MATERIALIZED (  -- resolvers that answered on every DoX protocol, per vantage point
    -- (hashed DISTINCT then count: count(DISTINCT protocol) would sort every row)
    SELECT vantage_id, address
      FROM (SELECT DISTINCT vantage_id, address, protocol FROM ok
             WHERE phase = 'measured' AND protocol = ANY(%(dox_protocols)s::text[])) x
     GROUP BY 1, 2 HAVING count(*) = cardinality(%(dox_protocols)s::text[]))
"""

# RTT of a measurement: the median of the answered RTT samples of the same campaign,
# address, transport and port (the transport the protocol uses: names.PROTOCOL_TRANSPORT).
# Finished campaigns take it from rtt_medians (migration 0002, kept by
# refresh_rtt_medians); running ones, or databases without that table, sort the samples.
_RTT_MEDIAN_SQL = """
    SELECT s.campaign_id, s.address, s.transport, s.port,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY s.rtt_ns) AS rtt_ns{extra}
      FROM rtt_samples s
     WHERE s.status = 'ok' AND s.rtt_ns > 0 AND {where}
     GROUP BY 1, 2, 3, 4"""

# A campaign's rtt_medians are current when it is no longer running and they were
# computed after it finished.
_CACHE_VALID = "c.status <> 'running' AND (c.finished_at IS NULL OR m.computed_at >= c.finished_at)"

_PAIRED_SQL = """,
paired AS (
    SELECT ok.vantage_id, ok.protocol, ok.phase, ok.mode, ok.key_share, ok.address,
           ok.resolve_ns, ok.handshake_ns, rtt.rtt_ns,
           ok.handshake_ns::float8 / NULLIF(rtt.rtt_ns, 0) AS ratio,
           (dox.address IS NOT NULL) AS dox
      FROM ok
      LEFT JOIN rtt ON rtt.campaign_id = ok.campaign_id AND rtt.address = ok.address
                   AND rtt.port = ok.port
                   AND rtt.transport = """ + names.sql_transport("ok.protocol") + """
      LEFT JOIN dox ON dox.vantage_id = ok.vantage_id AND dox.address = ok.address
     WHERE NOT %(require_rtt)s OR ok.protocol = 'doudp' OR rtt.rtt_ns IS NOT NULL)
"""


def _rtt_cte(cached: bool) -> str:
    if not cached:
        return ",\nrtt AS MATERIALIZED (" + _RTT_MEDIAN_SQL.format(
            extra="", where="s.campaign_id IN (SELECT campaign_id FROM c)") + ")" + _PAIRED_SQL
    return (""",
cached AS (SELECT c.campaign_id FROM c JOIN rtt_median_campaigns m USING (campaign_id)
            WHERE """ + _CACHE_VALID + """),
rtt AS MATERIALIZED (
    SELECT r.campaign_id, r.address, r.transport, r.port, r.rtt_ns
      FROM rtt_medians r JOIN cached USING (campaign_id)
    UNION ALL""" + _RTT_MEDIAN_SQL.format(
        extra="", where="s.campaign_id = ANY(%(uncached)s::bigint[])"
                     " AND s.campaign_id NOT IN (SELECT campaign_id FROM cached)")
            + ")" + _PAIRED_SQL)


def has_rtt_medians(conn) -> bool:
    """Whether the database has the rtt_medians cache (schema migration 0002)."""
    return bool(conn.execute("""SELECT to_regclass('rtt_medians') IS NOT NULL
                                   AND to_regclass('rtt_median_campaigns') IS NOT NULL""").fetchone()[0])


def refresh_rtt_medians(conn, weeks=None, vantages=None, batch: int = 8) -> int:
    """Compute rtt_medians for the selected campaigns that are finished and not yet (or
    no longer) cached, `batch` campaigns per transaction; returns how many campaigns were
    computed. A database without the table, or a connection that may not write it
    (read-only analyst), computes nothing: the queries then sort the samples themselves."""
    if not has_rtt_medians(conn):
        return 0
    todo = [r[0] for r in conn.execute("""
        SELECT c.campaign_id FROM campaigns c LEFT JOIN rtt_median_campaigns m USING (campaign_id)
         WHERE c.status <> 'running'
           AND (m.campaign_id IS NULL OR NOT (""" + _CACHE_VALID + """))
           AND (%(weeks)s::text[] IS NULL OR to_char(c.round_hour, 'IYYY-"W"IW') = ANY(%(weeks)s::text[]))
           AND (%(vantages)s::text[] IS NULL OR c.vantage_id = ANY(%(vantages)s::text[]))
         ORDER BY 1""", _params(weeks, vantages)).fetchall()]
    return _refill(conn, todo, batch, [
        "DELETE FROM rtt_median_campaigns WHERE campaign_id = ANY(%(ids)s)",
        "DELETE FROM rtt_medians WHERE campaign_id = ANY(%(ids)s)",
        "INSERT INTO rtt_medians (campaign_id, address, transport, port, rtt_ns, samples)"
        + _RTT_MEDIAN_SQL.format(extra=", count(*)", where="s.campaign_id = ANY(%(ids)s)")
        + " ON CONFLICT DO NOTHING",
        """INSERT INTO rtt_median_campaigns (campaign_id, keys)
           SELECT i, (SELECT count(*) FROM rtt_medians WHERE campaign_id = i)
             FROM unnest(%(ids)s::bigint[]) AS i
           ON CONFLICT DO NOTHING"""])


def _refill(conn, todo: list[int], batch: int, statements: list[str], **params) -> int:
    """Recompute a per-campaign cache, `batch` campaigns of `todo` per transaction: the
    statements run in order with %(ids)s (the batch) and `params`. A connection that may
    not write the cache (read-only analyst) stops there; returns the campaigns done."""
    done = 0
    for i in range(0, len(todo), batch):
        ids = todo[i:i + batch]
        try:
            with conn.transaction():
                for sql in statements:
                    conn.execute(sql, {"ids": ids, **params})
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
            return done
        done += len(ids)
    return done


METRICS = ["resolve_ns", "rtt_ns", "handshake_ns", "ratio"]
ROUND_TRIP_CLASSES = 5  # handshakes of 5 or more round trips share the last class


def _rtt_for(conn, weeks, vantages, refresh: bool, params: dict) -> str:
    """The rtt and paired CTEs, after bringing rtt_medians up to date when `refresh`;
    sets params['uncached'] to the selected campaigns whose RTTs are not cached (a
    literal list: a subquery there made the planner walk all of rtt_samples' index)."""
    cached = has_rtt_medians(conn)
    if cached and refresh:
        refresh_rtt_medians(conn, weeks, vantages)
    if cached:
        params["uncached"] = [r[0] for r in conn.execute("WITH " + _CAMPAIGNS_CTE.split("ok AS")[0].rstrip().rstrip(",") + """
            SELECT c.campaign_id FROM c LEFT JOIN rtt_median_campaigns m USING (campaign_id)
             WHERE m.campaign_id IS NULL OR NOT (""" + _CACHE_VALID + ")", params).fetchall()]
    return _rtt_cte(cached)


def _probs(points: int) -> list[float]:
    return [k / points for k in range(1, points + 1)]


GROUP_COLUMNS = ("vantage_id", "protocol", "phase", "mode", "key_share", "dox")
# Value domains of the group columns fixed by schema.sql's CHECK constraints.
_PHASES = names.PHASES
_MODES = names.MODES

# ----------------------------------------------------------------------------------
# Measurement facts: one compact record per successful measurement of a selection,
# fetched once (binary COPY, no per-row Python) and shared by answering() and
# response_times(). PostgreSQL only filters and pairs each measurement with its RTT
# (a hash of the campaign's rtt_medians); the DoX set, address numbering and grouping
# happen in numpy, so the query is a single scan of measurements per part with nothing
# the planner can misestimate (CTEs without statistics made it hash 5 M measurements
# three times: 81 s per vantage point; the plain join takes 15 s).

# One fixed-width row per successful measurement in PostgreSQL's binary COPY format
# (big-endian; every field non-NULL: a field count, then length + value per field):
# packed categories, campaign, address (high and low 64 bits; IPv4 in the low word),
# resolve, handshake and RTT (NaN when absent), DoQ/DoH3 handshake cause (CAUSES).
_COPY_ROW = np.dtype([("nf", ">i2"), ("l0", ">i4"), ("g", ">i4"), ("l1", ">i4"), ("cid", ">i8"),
                      ("l2", ">i4"), ("hi", ">i8"), ("l3", ">i4"), ("lo", ">i8"),
                      ("l4", ">i4"), ("resolve", ">f8"), ("l5", ">i4"), ("handshake", ">f8"),
                      ("l6", ">i4"), ("rtt", ">f8"), ("l7", ">i4"), ("cause", ">i2")])
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_COPY_TRAILER = b"\xff\xff"  # a field count of -1
_COPY_BLOCK = 32 << 20  # convert the stream to compact arrays every 32 MB

# Packed categories: protocol + 8 * (phase + 3 * (mode + 5 * (IPv6 + 2 * key share))),
# each an index into its domain; a value outside the domain gets the domain's length
# (schema.sql's CHECKs exclude that for protocol, phase and mode: an error if seen; an
# unknown key share makes measurement_facts look its name up).
_R_PROTO, _R_PHASE, _R_MODE, _R_FAM = 8, 3, 5, 2

# Key shares the measure tool writes (internal/measure: --key-shares); '' for protocols
# without one. Others are found in the data (campaign config, column statistics, and a
# last query only when a row has a key share none of these name).
_KNOWN_KEY_SHARES = ["", "x25519", "x25519mlkem768"]

# handshake_analyses.cause values (schema.sql's CHECK); facts store 1 + the index, 0 for
# a measurement without an analysis (only QUIC measurements have one).
CAUSES = names.CAUSES
_CAUSE_EXPR = """COALESCE(CASE WHEN m.protocol IN """ + names.sql_list(names.protocols_over("quic")) + """
                   THEN array_position(%(causes)s::text[],
                   (SELECT ha.cause FROM handshake_analyses ha WHERE ha.measurement_id = m.measurement_id)) END,
                 0)::int2"""  # a primary-key lookup per QUIC measurement: no 4 M-row hash per batch

_ADDR_HI = "('x' || encode(substring(inet_send(m.address) from 5 for 8), 'hex'))::bit(64)::int8"
_ADDR_LO = "('x' || encode(substring(inet_send(m.address) from 13 for 8), 'hex'))::bit(64)::int8"
_TRANSPORT = names.sql_transport("m.protocol")

_FACTS_SELECT = """
SELECT (COALESCE(array_position(%(protos)s::text[], m.protocol) - 1, {np})
        + {rp} * (COALESCE(array_position(%(phases)s::text[], m.phase) - 1, {nph})
        + {rph} * (COALESCE(array_position(%(modes)s::text[], m.mode) - 1, {nm})
        + {rm} * ((family(m.address) = 6)::int
        + {rf} * COALESCE(array_position(%(kshares)s::text[], m.key_share) - 1, %(nks)s)))))::int4,
       m.campaign_id::int8,
       CASE WHEN family(m.address) = 4 THEN 0::int8 ELSE """ + _ADDR_HI + """ END,
       CASE WHEN family(m.address) = 4 THEN m.address - '0.0.0.0'::inet ELSE """ + _ADDR_LO + """ END,
       COALESCE(m.resolve_ns::float8, 'NaN'), COALESCE(m.handshake_ns::float8, 'NaN'),
       COALESCE(r.rtt_ns::float8, 'NaN'), """ + _CAUSE_EXPR + """
  FROM measurements m
  LEFT JOIN {rtt} r ON r.campaign_id = m.campaign_id AND r.address = m.address AND r.port = m.port
       AND r.transport = """ + _TRANSPORT + """{rtt_on}
 WHERE m.campaign_id = ANY(%(part)s::bigint[]) AND m.status = 'ok' AND m.rcode IS NOT NULL"""


def _facts_sql(cached: bool) -> str:
    """The facts query for a part whose RTTs are all cached (rtt_medians joined directly:
    a table with statistics, so the 1.4 M-key RTT hash is built and the measurements
    stream through it) or all computed from the samples (running campaigns, no cache)."""
    fmt = dict(np=len(names.PROTOCOLS), rp=_R_PROTO, nph=len(_PHASES), rph=_R_PHASE,
               nm=len(_MODES), rm=_R_MODE, rf=_R_FAM)
    if cached:
        return _FACTS_SELECT.format(rtt="rtt_medians", rtt_on=" AND r.campaign_id = ANY(%(part)s::bigint[])", **fmt)
    return ("WITH rtt AS MATERIALIZED (" + _RTT_MEDIAN_SQL.format(extra="", where="s.campaign_id = ANY(%(part)s::bigint[])")
            + ")" + _FACTS_SELECT.format(rtt="rtt", rtt_on="", **fmt))


def address_key(addr: str) -> tuple[int, int, int]:
    """(IPv6, high 64 bits, low 64 bits) of an address as Facts.addresses holds it: the
    IPv4 address in the low word, IPv6 words as signed 64-bit integers (the SQL's int8)."""
    a = ipaddress.ip_address(addr)
    if a.version == 4:
        return 0, 0, int(a)
    b = a.packed
    return 1, int.from_bytes(b[:8], "big", signed=True), int.from_bytes(b[8:], "big", signed=True)


class Facts:
    """Successful measurements (status ok with an rcode) of a selection, one entry per
    measurement, as numpy arrays of equal length:

      vantage, protocol, phase, mode, key_share  indices into the domain lists
                 vantages, names.PROTOCOLS, PHASES, MODES, key_shares
      aid        address number (0..n_addresses-1, exact for IPv4 and IPv6)
      resolve, handshake, rtt  nanoseconds as float64, NaN when absent (rtt: the median
                 of the answered RTT samples of the same campaign, address, transport
                 and port)
      cause      DoQ/DoH3 handshake cause: 1 + index in CAUSES, 0 without an analysis
      dox        the (vantage point, address) answered a measured query on every DoX
                 protocol (names.DOX_PROTOCOLS) in the selection
    and `addresses`: row aid is (IPv6, high 64 bits, low 64 bits; IPv4 in the low bits).
    """

    PHASES = _PHASES
    MODES = _MODES

    def __init__(self, vantages, key_shares, cols: dict[str, np.ndarray], n_addresses: int):
        self.vantages = list(vantages)
        self.key_shares = list(key_shares)
        self.n_addresses = n_addresses
        for k, v in cols.items():
            setattr(self, k, v)
        dox_ids = [names.PROTOCOLS.index(p) for p in names.DOX_PROTOCOLS]
        key = self.vantage.astype(np.int64) * max(n_addresses, 1) + self.aid
        measured = self.phase == self.PHASES.index("measured")
        sets = [np.unique(key[measured & (self.protocol == p)]) for p in dox_ids]
        both = sets[0] if sets else np.empty(0, dtype=np.int64)
        for s in sets[1:]:
            both = np.intersect1d(both, s, assume_unique=True)
        self.dox_keys = both
        self.dox = np.isin(key, both)

    def __len__(self) -> int:
        return len(self.aid)

    def address_ids(self, v6, hi, lo) -> np.ndarray:
        """aid of each (IPv6, high, low) address encoding, -1 for addresses not in the facts."""
        want = np.stack([np.asarray(v6, np.int64), np.asarray(hi, np.int64), np.asarray(lo, np.int64)], axis=1)
        index = {tuple(r): i for i, r in enumerate(self.addresses.tolist())}
        return np.asarray([index.get(tuple(r), -1) for r in want.tolist()], dtype=np.int64)

    def domain(self, col: str) -> list:
        return {"vantage_id": self.vantages, "protocol": list(names.PROTOCOLS), "phase": self.PHASES,
                "mode": self.MODES, "key_share": self.key_shares, "dox": [False, True]}[col]

    def column(self, col: str) -> np.ndarray:
        return {"vantage_id": self.vantage, "protocol": self.protocol, "phase": self.phase,
                "mode": self.mode, "key_share": self.key_share, "dox": self.dox}[col]


def has_measurement_facts(conn) -> bool:
    """Whether the database has the measurement_facts cache (schema migration 0003)."""
    return bool(conn.execute("""SELECT to_regclass('measurement_facts') IS NOT NULL
                                   AND to_regclass('measurement_fact_campaigns') IS NOT NULL""").fetchone()[0])


def _selected_campaigns(conn, weeks, vantages) -> list[tuple[int, str, bool, bool]]:
    """(campaign_id, vantage_id, RTTs cached, facts cached) of the selected campaigns."""
    rtt = has_rtt_medians(conn)
    facts = rtt and has_measurement_facts(conn)
    sql = "SELECT c.campaign_id, c.vantage_id, "
    sql += "(m.campaign_id IS NOT NULL AND " + _CACHE_VALID + ")" if rtt else "false"
    sql += ", (m.campaign_id IS NOT NULL AND " + _CACHE_VALID + " AND f.campaign_id IS NOT NULL AND " \
        + _CACHE_VALID.replace("m.computed_at", "f.computed_at") + ")" if facts else ", false"
    sql += " FROM campaigns c"
    if rtt:
        sql += " LEFT JOIN rtt_median_campaigns m USING (campaign_id)"
    if facts:
        sql += " LEFT JOIN measurement_fact_campaigns f USING (campaign_id)"
    sql += """ WHERE (%(weeks)s::text[] IS NULL OR to_char(c.round_hour, 'IYYY-"W"IW') = ANY(%(weeks)s::text[]))
                 AND (%(vantages)s::text[] IS NULL OR c.vantage_id = ANY(%(vantages)s::text[]))
               ORDER BY 1"""
    return [tuple(r) for r in conn.execute(sql, _params(weeks, vantages)).fetchall()]


# Records of measurement_facts (migration 0003), big-endian: address, resolve, handshake,
# RTT, handshake cause (1 + index in CAUSES; 0 none).
_FACT_REC = {4: np.dtype([("lo", ">u4"), ("resolve", ">f8"), ("handshake", ">f8"), ("rtt", ">f8"), ("cause", ">i2")]),
             6: np.dtype([("hi", ">i8"), ("lo", ">i8"), ("resolve", ">f8"), ("handshake", ">f8"), ("rtt", ">f8"),
                          ("cause", ">i2")])}

_FACTS_FILL = """
INSERT INTO measurement_facts (campaign_id, protocol, phase, mode, key_share, family, measurements, records)
SELECT m.campaign_id, m.protocol, m.phase, m.mode, m.key_share, family(m.address)::int2, count(*),
       string_agg(substring(inet_send(m.address) from 5)          -- 4 or 16 address bytes
                  || float8send(COALESCE(m.resolve_ns::float8, 'NaN'))
                  || float8send(COALESCE(m.handshake_ns::float8, 'NaN'))
                  || float8send(COALESCE(r.rtt_ns::float8, 'NaN'))
                  || int2send(""" + _CAUSE_EXPR + """), ''::bytea)
  FROM measurements m
  LEFT JOIN rtt_medians r ON r.campaign_id = m.campaign_id AND r.address = m.address AND r.port = m.port
       AND r.transport = """ + _TRANSPORT + """ AND r.campaign_id = ANY(%(ids)s::bigint[])
 WHERE m.campaign_id = ANY(%(ids)s::bigint[]) AND m.status = 'ok' AND m.rcode IS NOT NULL
 GROUP BY 1, 2, 3, 4, 5, 6"""


def refresh_measurement_facts(conn, weeks=None, vantages=None, batch: int = 8) -> int:
    """Fill measurement_facts for the selected campaigns that are finished, have current
    rtt_medians, and are not yet (or no longer) cached, `batch` campaigns per
    transaction, over PARALLEL connections (the caller's alone inside a transaction);
    returns how many campaigns were computed. Without the table or the right to write
    it, computes nothing (measurement_facts then joins at query time)."""
    if not (has_rtt_medians(conn) and has_measurement_facts(conn)):
        return 0
    todo = [c for c, _, rtt_ok, facts_ok in _selected_campaigns(conn, weeks, vantages) if rtt_ok and not facts_ok]
    n = min(PARALLEL, -(-len(todo) // batch))
    if n < 2 or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return _fill_facts(conn, todo, batch)
    from concurrent.futures import ThreadPoolExecutor
    kw = dict(conn.info.get_parameters())
    if conn.info.password:
        kw["password"] = conn.info.password
    step = -(-len(todo) // n)  # contiguous ranges: each connection reads its own pages

    def work(ids):
        with psycopg.connect(autocommit=True, **kw) as c2:
            c2.execute("SET jit = off")
            return _fill_facts(c2, ids, batch)

    with ThreadPoolExecutor(max_workers=n) as ex:
        return sum(ex.map(work, [todo[i:i + step] for i in range(0, len(todo), step)]))


def _fill_facts(conn, todo: list[int], batch: int) -> int:
    return _refill(conn, todo, batch, [
        "SET LOCAL enable_mergejoin = off",
        "SET LOCAL work_mem = '256MB'",
        "DELETE FROM measurement_fact_campaigns WHERE campaign_id = ANY(%(ids)s)",
        "DELETE FROM measurement_facts WHERE campaign_id = ANY(%(ids)s)",
        _FACTS_FILL,
        """INSERT INTO measurement_fact_campaigns (campaign_id, measurements)
           SELECT i, (SELECT COALESCE(sum(measurements), 0) FROM measurement_facts
                       WHERE campaign_id = i)
             FROM unnest(%(ids)s::bigint[]) AS i
           ON CONFLICT DO NOTHING"""], causes=CAUSES)


def _read_cached_facts(conn, ids: list[int], kshares: list[str], cids, cvant) -> list[dict]:
    """Blocks (as _decode makes them) from measurement_facts; key shares not yet in
    `kshares` are appended to it."""
    if not ids:
        return []
    blocks = []
    with conn.cursor(binary=True) as cur:
        cur.execute("""SELECT campaign_id, protocol, phase, mode, key_share, family, measurements, records
                         FROM measurement_facts WHERE campaign_id = ANY(%(ids)s::bigint[])""", {"ids": ids})
        while rows := cur.fetchmany(256):
            for cid, proto, phase, mode, ks, fam, n, rec in rows:
                r = np.frombuffer(rec, dtype=_FACT_REC[fam])
                if len(r) != n:
                    raise RuntimeError(f"measurement_facts: campaign {cid} {proto}: {len(r)} records, expected {n}")
                if ks not in kshares:
                    kshares.append(ks)
                try:
                    idx = (names.PROTOCOLS.index(proto), _PHASES.index(phase), _MODES.index(mode))
                except ValueError as e:
                    raise RuntimeError(f"measurement_facts: {e} (schema.sql's CHECK)") from e
                blocks.append({
                    "protocol": np.full(n, idx[0], np.int8), "phase": np.full(n, idx[1], np.int8),
                    "mode": np.full(n, idx[2], np.int8), "v6": np.full(n, fam == 6),
                    "key_share": np.full(n, kshares.index(ks), np.int16),
                    "vantage": np.full(n, cvant[np.searchsorted(cids, cid)], np.int16),
                    "hi": r["hi"].astype(np.int64) if fam == 6 else np.zeros(n, np.int64),
                    "lo": r["lo"].astype(np.int64),
                    "resolve": r["resolve"].astype(np.float64), "handshake": r["handshake"].astype(np.float64),
                    "rtt": r["rtt"].astype(np.float64), "cause": r["cause"].astype(np.int8)})
    return blocks


def _key_share_candidates(conn, ids: list[int]) -> list[str]:
    """Key share names likely present: the known ones, the campaigns' configuration
    (measure writes config.key_shares) and the column's most common values."""
    out = list(_KNOWN_KEY_SHARES)
    rows = conn.execute("""
        SELECT DISTINCT k FROM campaigns c, jsonb_array_elements_text(
                 CASE WHEN jsonb_typeof(c.config -> 'key_shares') = 'array' THEN c.config -> 'key_shares'
                      ELSE '[]'::jsonb END) AS k
         WHERE c.campaign_id = ANY(%(ids)s::bigint[])
        UNION
        SELECT unnest(most_common_vals::text::text[]) FROM pg_stats
         WHERE schemaname = current_schema() AND tablename = 'measurements' AND attname = 'key_share'""",
                        {"ids": ids}).fetchall()
    out += sorted({r[0] for r in rows if r[0] is not None} - set(out))
    return out


def _decode(rec: np.ndarray, cids: np.ndarray, cvant: np.ndarray) -> dict[str, np.ndarray]:
    """Compact native arrays from a block of _COPY_ROW records."""
    g = rec["g"].astype(np.int32)
    out = {"protocol": (g % _R_PROTO).astype(np.int8)}
    g //= _R_PROTO
    out["phase"] = (g % _R_PHASE).astype(np.int8)
    g //= _R_PHASE
    out["mode"] = (g % _R_MODE).astype(np.int8)
    g //= _R_MODE
    out["v6"] = (g % _R_FAM).astype(bool)
    out["key_share"] = (g // _R_FAM).astype(np.int16)
    out["vantage"] = cvant[np.searchsorted(cids, rec["cid"].astype(np.int64))]
    out["hi"] = rec["hi"].astype(np.int64)
    out["lo"] = rec["lo"].astype(np.int64)
    for f in ("resolve", "handshake", "rtt"):
        out[f] = rec[f].astype(np.float64)
    out["cause"] = rec["cause"].astype(np.int8)
    for f, dom in (("protocol", names.PROTOCOLS), ("phase", _PHASES), ("mode", _MODES)):
        if len(out[f]) and int(out[f].max()) >= len(dom):
            raise RuntimeError(f"measurements.{f} outside {dom} (schema.sql's CHECK)")
    return out


def _copy_facts(conn, sql: str, params: dict, cids: np.ndarray, cvant: np.ndarray) -> list[dict]:
    """Run `COPY (sql) TO STDOUT (FORMAT binary)` and decode its rows block by block
    (the raw stream is never held whole: ~82 bytes a row raw, ~46 decoded)."""
    stmt = psycopg.ClientCursor(conn).mogrify(sql, params)
    blocks, buf, start = [], bytearray(), None
    size = _COPY_ROW.itemsize
    with conn.transaction(), conn.cursor() as cur:
        # The planner sorted all measurements for merge joins when it underestimated the
        # RTT set; a hash join probes it in one scan. JIT buys nothing for one scan
        # (and cost 20 s of compilation in doq_causes on the 10 M bench).
        cur.execute("SET LOCAL enable_mergejoin = off")
        cur.execute("SET LOCAL jit = off")
        cur.execute("SET LOCAL work_mem = '512MB'")  # the RTT hash in one batch
        with cur.copy("COPY (" + stmt + ") TO STDOUT (FORMAT binary)") as cp:
            for chunk in cp:
                buf += chunk
                if start is None and len(buf) >= 19:
                    if not buf.startswith(_COPY_SIGNATURE):
                        raise RuntimeError("COPY: not PostgreSQL's binary format")
                    start = 19 + int.from_bytes(buf[15:19], "big")
                if start is not None and len(buf) - start >= _COPY_BLOCK:
                    n = (len(buf) - start - len(_COPY_TRAILER)) // size  # keep the trailer's bytes
                    blocks.append(_decode(np.frombuffer(buf, dtype=_COPY_ROW, count=n, offset=start), cids, cvant))
                    del buf[:start + n * size]
                    start = 0
    if start is None or not buf.endswith(_COPY_TRAILER):
        raise RuntimeError("COPY: truncated binary stream")
    body = len(buf) - start - len(_COPY_TRAILER)
    if body % size:
        raise RuntimeError("COPY: rows are not of the expected fixed width (a NULL field?)")
    if body:
        blocks.append(_decode(np.frombuffer(buf, dtype=_COPY_ROW, count=body // size, offset=start), cids, cvant))
    return blocks


def _parts(camps: list[tuple[int, bool]], n: int) -> list[tuple[list[int], bool]]:
    """Campaigns (id, RTTs cached) split into up to n parts of similar size with cached
    RTTs, plus one part for the uncached ones (they take the other query)."""
    cached = [c for c, ok in camps if ok]
    uncached = [c for c, ok in camps if not ok]
    n = max(1, min(n, len(cached)))
    # contiguous ranges: a campaign's rows are stored together, so each part reads its
    # own pages (interleaved campaigns made every part read the whole table)
    step = -(-len(cached) // n) if cached else 1
    parts = [(cached[i:i + step], True) for i in range(0, len(cached), step)]
    if uncached:
        parts.append((uncached, False))
    return parts


@_on_lake
def measurement_facts(conn, weeks=None, vantages=None, refresh: bool = True) -> Facts:
    """The successful measurements of the selected weeks and vantage points with their
    RTT (see Facts): finished campaigns from measurement_facts (migration 0003), the
    others from one scan of measurements joined with their RTTs, split over PARALLEL
    connections. With `refresh`, rtt_medians and measurement_facts are first brought up
    to date for the selection (refresh_rtt_medians, refresh_measurement_facts)."""
    if refresh:
        refresh_rtt_medians(conn, weeks, vantages)
        refresh_measurement_facts(conn, weeks, vantages)
    camps = _selected_campaigns(conn, weeks, vantages)
    vant_dom = sorted({c[1] for c in camps})
    cids = np.asarray([c[0] for c in camps], dtype=np.int64)
    cvant = np.asarray([vant_dom.index(c[1]) for c in camps], dtype=np.int16)
    kshares = _key_share_candidates(conn, [c[0] for c in camps if not c[3]]) if not all(c[3] for c in camps) \
        else list(_KNOWN_KEY_SHARES)
    cached = _read_cached_facts(conn, [c[0] for c in camps if c[3]], kshares, cids, cvant)
    base = {"protos": list(names.PROTOCOLS), "phases": Facts.PHASES, "modes": Facts.MODES, "causes": CAUSES}
    parts = _parts([(c[0], c[2]) for c in camps if not c[3]], PARALLEL)
    while True:
        p = dict(base, kshares=kshares, nks=len(kshares))
        fetched = _run_parts(conn, parts, p, cids, cvant) if parts else []
        ks = np.concatenate([b["key_share"] for b in fetched]) if fetched else np.empty(0, np.int16)
        if not (ks == len(kshares)).any():
            break
        # a key share none of the candidates names: ask for the names, then fetch again
        more = [r[0] for r in conn.execute("""
            SELECT DISTINCT key_share FROM measurements
             WHERE campaign_id = ANY(%(ids)s::bigint[]) AND status = 'ok' AND rcode IS NOT NULL
               AND NOT (key_share = ANY(%(ks)s::text[]))""",
                                           {"ids": [i for ids, _ in parts for i in ids], "ks": kshares}).fetchall()]
        if not more:
            raise RuntimeError("key share outside every candidate, yet none found")
        kshares += sorted(more)
    blocks = cached + fetched
    del cached, fetched
    cols = {}
    for f in ("vantage", "protocol", "phase", "mode", "key_share", "v6", "hi", "lo", "resolve", "handshake", "rtt",
              "cause"):
        cols[f] = (np.concatenate([b[f] for b in blocks]) if blocks else np.empty(0))
        for b in blocks:
            b.pop(f)
    del blocks
    # address numbers; a plain unique of the low words when every address is IPv4
    if len(cols["v6"]) and cols["v6"].any():
        addr = np.stack([cols["v6"].astype(np.int64), cols["hi"], cols["lo"]], axis=1)
        table, aid = np.unique(addr, axis=0, return_inverse=True)
        del addr
    else:  # the distinct addresses (thousands) by hashing, then a binary search per row:
        lo = cols["lo"].astype(np.int64)  # 3x faster than unique(return_inverse)'s full sort
        u = np.unique(lo)
        aid = np.searchsorted(u, lo)
        table = np.stack([np.zeros(len(u), np.int64), np.zeros(len(u), np.int64), u], axis=1)
    n_addr = int(aid.max()) + 1 if len(aid) else 0
    cols["aid"] = aid.reshape(-1).astype(np.int32)
    for f in ("v6", "hi", "lo"):
        del cols[f]
    # key shares present, renumbered in name order
    present = sorted({kshares[i] for i in np.unique(cols["key_share"])})
    remap = np.asarray([present.index(k) if k in present else -1 for k in kshares], dtype=np.int16)
    cols["key_share"] = remap[cols["key_share"]] if len(cols["key_share"]) else cols["key_share"].astype(np.int16)
    for f, t in (("vantage", np.int16), ("protocol", np.int8), ("phase", np.int8), ("mode", np.int8)):
        cols[f] = cols[f].astype(t)
    f = Facts(vant_dom, present, cols, n_addr)
    f.addresses = table  # row aid: (IPv6, high 64 bits, low 64 bits)
    return f


def _run_parts(conn, parts, params, cids, cvant) -> list[dict]:
    """Every part's COPY, PARALLEL at a time on their own connections (the caller's
    connection alone when PARALLEL is 1: it then sees its own open transaction)."""
    if PARALLEL < 2 or len(parts) < 2:
        out = []
        for ids, cached in parts:
            out += _copy_facts(conn, _facts_sql(cached), dict(params, part=ids), cids, cvant)
        return out
    from concurrent.futures import ThreadPoolExecutor
    kw = dict(conn.info.get_parameters())
    if conn.info.password:
        kw["password"] = conn.info.password
    work_mem = conn.execute("SHOW work_mem").fetchone()[0]

    def part(pc):
        ids, cached = pc
        with psycopg.connect(autocommit=True, **kw) as c2:
            c2.execute("SELECT set_config('work_mem', %s, false)", (work_mem,))
            return _copy_facts(c2, _facts_sql(cached), dict(params, part=ids), cids, cvant)

    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(parts))) as ex:
        return [b for bl in ex.map(part, parts) for b in bl]


def _pg_median(x: np.ndarray) -> float:
    """percentile_cont(0.5) of sorted x, with PostgreSQL's interpolation formula."""
    n = len(x)
    pos = 0.5 * (n - 1)
    lo = int(np.floor(pos))
    hi = int(np.ceil(pos))
    if lo == hi:
        return float(x[lo])
    return float(x[lo] + (x[hi] - x[lo]) * (pos - lo))


@_on_lake
def response_times(conn, weeks=None, vantages=None, dox_only: bool = False,
                   require_rtt: bool = True, points: int = DEFAULT_POINTS,
                   group_by: Sequence[str] = GROUP_COLUMNS, refresh: bool = True,
                   facts: Facts | None = None, addresses: Sequence[str] | None = None) -> pd.DataFrame:
    """Distributions of resolve time, RTT, handshake time and handshake-to-RTT ratio.

    Same rows and values as response_times_sql (the reference, all in SQL), computed
    from measurement_facts (pass `facts` to reuse one fetch for several calls; weeks,
    vantages and refresh are then those of the facts): numpy sorts each group's values
    once. The order statistics, medians and counts are the same numbers exactly; means
    are exact for resolve and handshake times (integer sums) and within float rounding
    for RTT and ratio. `addresses` (strings) keeps only the measurements of those
    resolvers."""
    allowed = set(GROUP_COLUMNS)
    bad = set(group_by) - allowed
    if bad:
        raise ValueError(f"cannot group by {sorted(bad)}; allowed: {sorted(allowed)}")
    group_by = list(group_by)
    f = facts if facts is not None else measurement_facts(conn, weeks, vantages, refresh)
    keep = np.ones(len(f), dtype=bool)
    if require_rtt:  # the study's rule: an answered RTT, except DoUDP
        keep = (f.protocol == names.PROTOCOLS.index("doudp")) | ~np.isnan(f.rtt)
    if dox_only:
        keep &= f.dox
    if addresses is not None:
        keys = [address_key(a) for a in addresses]
        ids = f.address_ids([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys])
        keep &= np.isin(f.aid, ids[ids >= 0])
    # mixed-radix group number
    code = np.zeros(int(keep.sum()), dtype=np.int64)
    radix, mult = [], 1
    for col in reversed(group_by):
        size = len(f.domain(col))
        code += f.column(col)[keep].astype(np.int64) * mult
        radix.append((col, mult, size))
        mult *= size
    order = np.argsort(code, kind="stable")
    g = code[order]
    del code
    cuts = np.flatnonzero(np.diff(g)) + 1
    starts = np.concatenate(([0], cuts)) if len(g) else np.empty(0, dtype=int)
    ends = np.concatenate((cuts, [len(g)])) if len(g) else np.empty(0, dtype=int)
    aid = f.aid[keep][order]
    vals = {"resolve_ns": f.resolve[keep][order], "handshake_ns": f.handshake[keep][order],
            "rtt_ns": f.rtt[keep][order]}
    with np.errstate(divide="ignore", invalid="ignore"):
        rtt = vals["rtt_ns"]
        vals["ratio"] = np.where(rtt != 0, vals["handshake_ns"] / np.where(rtt != 0, rtt, 1), np.nan)
    probs = np.asarray(_probs(points))
    out = []
    for a, b in zip(starts, ends):
        rec = {}
        c = int(g[a])
        for col, m, size in radix:
            rec[col] = f.domain(col)[(c // m) % size]
        rec["n"] = int(b - a)
        rec["resolvers"] = int(np.unique(aid[a:b]).size)
        for met in METRICS:
            x = vals[met][a:b]
            x = np.sort(x[~np.isnan(x)])
            n = len(x)
            rec[f"{met}_n"] = n
            if n == 0:
                rec[f"{met}_mean"] = rec[f"{met}_median"] = None
                rec[f"{met}_q"] = np.empty(0)
                continue
            if met in ("resolve_ns", "handshake_ns"):  # integers: exact sum, correctly rounded mean
                rec[f"{met}_mean"] = int(x.astype(np.int64).sum()) / n
            else:
                rec[f"{met}_mean"] = float(x.mean())
            rec[f"{met}_median"] = _pg_median(x)
            rank = np.ceil(probs * n).astype(np.int64)
            rec[f"{met}_q"] = x[np.clip(rank, 1, n) - 1]
        r = vals["ratio"][a:b]
        r = r[~np.isnan(r)]
        cls = np.clip(np.rint(r), 1, ROUND_TRIP_CLASSES).astype(int)
        for k in range(1, ROUND_TRIP_CLASSES + 1):
            rec[f"round_trips_{k}"] = int((cls == k).sum())
        out.append(rec)
    cols = group_by + ["n", "resolvers"] + [f"{met}_{s}" for met in METRICS for s in ("n", "mean", "median", "q")] \
        + [f"round_trips_{k}" for k in range(1, ROUND_TRIP_CLASSES + 1)]
    df = pd.DataFrame(out, columns=cols)
    if len(df) and group_by:
        df = df.sort_values(group_by, kind="stable").reset_index(drop=True)
    return df


def response_times_sql(conn, weeks=None, vantages=None, dox_only: bool = False,
                       require_rtt: bool = True, points: int = DEFAULT_POINTS,
                       group_by: Sequence[str] = GROUP_COLUMNS, refresh: bool = True) -> pd.DataFrame:
    """Distributions of resolve time, RTT, handshake time and handshake-to-RTT ratio.

    One row per group (default: vantage point, protocol, phase, mode, key share, DoX
    membership). For each metric M in METRICS: M_n (values), M_mean, M_median (exact,
    percentile_cont) and M_q: a numpy array of the exact order statistics at ranks
    k/points, k = 1..points (percentile_disc), from which stats.ecdf_points draws the
    empirical CDF without binning. Only successful measurements (status ok with an
    rcode) count; with require_rtt (the study's rule) only those with an answered RTT
    sample, except DoUDP."""
    allowed = {"vantage_id", "protocol", "phase", "mode", "key_share", "dox"}
    bad = set(group_by) - allowed
    if bad:
        raise ValueError(f"cannot group by {sorted(bad)}; allowed: {sorted(allowed)}")
    cols = ", ".join(group_by)
    aggs = []
    for m in METRICS:
        aggs.append(f"count({m}) AS {m}_n, avg({m})::float8 AS {m}_mean, "
                    f"percentile_cont(0.5) WITHIN GROUP (ORDER BY {m}) AS {m}_median, "
                    f"percentile_disc(%(probs)s::float8[]) WITHIN GROUP (ORDER BY {m}) AS {m}_q")
    # handshakes in whole round trips (ratio rounded, 1..ROUND_TRIP_CLASSES), in the same pass
    for k in range(1, ROUND_TRIP_CLASSES + 1):
        aggs.append(f"count(ratio) FILTER (WHERE LEAST(GREATEST(round(ratio)::int, 1), {ROUND_TRIP_CLASSES}) = {k}) "
                    f"AS round_trips_{k}")
    p = _params(weeks, vantages, dox_protocols=names.DOX_PROTOCOLS, require_rtt=require_rtt,
                dox_only=dox_only, probs=_probs(points))
    sql = ("WITH " + _CAMPAIGNS_CTE + _rtt_for(conn, weeks, vantages, refresh, p) +
           f"SELECT {cols}, count(*) AS n, count(DISTINCT address) AS resolvers, " + ", ".join(aggs) +
           " FROM paired WHERE (NOT %(dox_only)s OR dox)" +
           f" GROUP BY {cols} ORDER BY {cols}")
    df = _frame(conn, sql, p)
    for m in METRICS:
        df[f"{m}_q"] = [np.asarray([x for x in q if x is not None], dtype=float) if q is not None
                        else np.empty(0) for q in df[f"{m}_q"]]
    return df


def ratio_classes(conn, weeks=None, vantages=None, dox_only: bool = False, max_class: int = 5,
                  require_rtt: bool = True, refresh: bool = True) -> pd.DataFrame:
    """Handshake-to-RTT ratios rounded to whole round trips (1, 2, ... max_class, where
    the last class holds everything above), per vantage, protocol, phase and mode; exact
    counts. Columns vantage_id, protocol, phase, mode, round_trips, measurements."""
    p = _params(weeks, vantages, dox_protocols=names.DOX_PROTOCOLS, require_rtt=require_rtt,
                dox_only=dox_only, max_class=max_class)
    return _frame(conn, "WITH " + _CAMPAIGNS_CTE + _rtt_for(conn, weeks, vantages, refresh, p) + """
        SELECT vantage_id, protocol, phase, mode,
               LEAST(GREATEST(round(ratio)::int, 1), %(max_class)s) AS round_trips,
               count(*) AS measurements
          FROM paired
         WHERE ratio IS NOT NULL AND (NOT %(dox_only)s OR dox)
         GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5""", p)


@_on_lake
def answering(conn, weeks=None, vantages=None, refresh: bool = True, facts: Facts | None = None) -> pd.DataFrame:
    """Resolvers that answered at least one measured query, per vantage and protocol,
    plus the DoX set (protocol 'dox'). Columns vantage_id, protocol, resolvers.
    From measurement_facts (pass `facts` to reuse the fetch of response_times)."""
    f = facts if facts is not None else measurement_facts(conn, weeks, vantages, refresh)
    m = f.phase == Facts.PHASES.index("measured")
    key = (f.vantage[m].astype(np.int64) * len(names.PROTOCOLS) + f.protocol[m]) * max(f.n_addresses, 1) + f.aid[m]
    u = np.unique(key) // max(f.n_addresses, 1)
    vp, n = np.unique(u, return_counts=True)
    rows = [(f.vantages[int(k) // len(names.PROTOCOLS)], names.PROTOCOLS[int(k) % len(names.PROTOCOLS)], int(c))
            for k, c in zip(vp, n)]
    dv, dn = np.unique(f.dox_keys // max(f.n_addresses, 1), return_counts=True)
    rows += [(f.vantages[int(v)], "dox", int(c)) for v, c in zip(dv, dn)]
    df = pd.DataFrame(rows, columns=["vantage_id", "protocol", "resolvers"])
    return df.sort_values(["vantage_id", "protocol"], kind="stable").reset_index(drop=True)


@_on_lake
def doq_causes(conn, weeks=None, vantages=None, facts: Facts | None = None) -> pd.DataFrame:
    """DoQ handshakes by cause (handshake_analyses.cause) per vantage, phase, mode, key
    share and resolver implementation (the stack fingerprint of the resolver's latest
    verification) over successful DoQ measurements (status ok with an rcode). Columns
    vantage_id, phase, mode, key_share, implementation, cause, handshakes. With `facts`
    (measurement_facts) the counting happens in numpy; weeks and vantages are then those
    of the facts."""
    if facts is not None:
        return _doq_causes_from(conn, facts)
    df = _frame(conn, """
        WITH c AS (SELECT campaign_id, vantage_id FROM campaigns
                    WHERE (%(weeks)s::text[] IS NULL OR to_char(round_hour, 'IYYY-"W"IW') = ANY(%(weeks)s::text[]))
                      AND (%(vantages)s::text[] IS NULL OR vantage_id = ANY(%(vantages)s::text[]))),
        fp AS (
            SELECT DISTINCT ON (r.address) r.address,
                   """ + _FINGERPRINT_SQL.format(col="COALESCE(r.scan_versions, sr.quic_versions)") + """ AS fp
              FROM verification_results r JOIN verification_runs vr USING (run_id)
              LEFT JOIN scan_replies sr ON sr.scan_id = vr.scan_id AND sr.port = r.port AND sr.address = r.address
             WHERE r.outcome = 'doq-verified'
             ORDER BY r.address, vr.iso_week DESC, """ + names.sql_port_rank("r.port") + """),
        agg AS (
            SELECT c.vantage_id, m.phase, m.mode, m.key_share, m.address, ha.cause
              FROM measurements m JOIN c USING (campaign_id)
              JOIN handshake_analyses ha USING (measurement_id)
             WHERE m.protocol = 'doq' AND m.status = 'ok' AND m.rcode IS NOT NULL)
        SELECT vantage_id, phase, mode, key_share, fp.fp AS implementation, cause, count(*) AS handshakes
          FROM agg LEFT JOIN fp USING (address)
         GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 6""", _params(weeks, vantages))
    df["implementation"] = [_fp_label(f) for f in df["implementation"]]
    return df


# The stack fingerprint of every DoQ-verified address (its latest verification, preferred port).
_IMPL_SQL = """
    SELECT DISTINCT ON (r.address) family(r.address) = 6 AS v6,
           CASE WHEN family(r.address) = 4 THEN 0::int8 ELSE """ + _ADDR_HI.replace("m.address", "r.address") + """ END AS hi,
           CASE WHEN family(r.address) = 4 THEN r.address - '0.0.0.0'::inet
                ELSE """ + _ADDR_LO.replace("m.address", "r.address") + """ END AS lo,
           """ + _FINGERPRINT_SQL.format(col="COALESCE(r.scan_versions, sr.quic_versions)") + """ AS fp
      FROM verification_results r JOIN verification_runs vr USING (run_id)
      LEFT JOIN scan_replies sr ON sr.scan_id = vr.scan_id AND sr.port = r.port AND sr.address = r.address
     WHERE r.outcome = 'doq-verified'
     ORDER BY r.address, vr.iso_week DESC, """ + names.sql_port_rank("r.port")


def _doq_causes_from(conn, f: Facts) -> pd.DataFrame:
    """doq_causes from measurement_facts: the fingerprints from one small query, the
    counting in numpy."""
    impl = conn.execute(_IMPL_SQL).fetchall()
    labels = ["no VN list"]  # label 0: an address without a verification
    impl_of = np.zeros(f.n_addresses, dtype=np.int32)
    if impl:
        ids = f.address_ids([r[0] for r in impl], [r[1] for r in impl], [r[2] for r in impl])
        label_ix = {}
        for aid, r in zip(ids, impl):
            if aid < 0:
                continue
            lab = _fp_label(r[3])
            if lab not in label_ix:
                label_ix[lab] = len(labels)
                labels.append(lab)
            impl_of[aid] = label_ix[lab]
    m = (f.protocol == names.PROTOCOLS.index("doq")) & (f.cause > 0)
    cols = [("vantage_id", f.vantage[m], f.vantages), ("phase", f.phase[m], Facts.PHASES),
            ("mode", f.mode[m], Facts.MODES), ("key_share", f.key_share[m], f.key_shares),
            ("implementation", impl_of[f.aid[m]], labels), ("cause", f.cause[m] - 1, CAUSES)]
    code = np.zeros(int(m.sum()), dtype=np.int64)
    mult = 1
    for _, v, dom in reversed(cols):
        code += v.astype(np.int64) * mult
        mult *= len(dom)
    u, n = np.unique(code, return_counts=True)
    out = {}
    rest = u.copy()
    for name, _, dom in reversed(cols):
        out[name] = [dom[i] for i in (rest % len(dom))]
        rest //= len(dom)
    df = pd.DataFrame({name: out[name] for name, _, _ in cols})
    df["handshakes"] = n.astype(np.int64)
    return df.sort_values([c for c, _, _ in cols], kind="stable").reset_index(drop=True)


@_on_lake
def features(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """resolver_features: resolvers per protocol and feature that support it, do not,
    or could not be told. Columns protocol, feature, supported, unsupported, unknown."""
    return _frame(conn, """
        WITH c AS (SELECT campaign_id FROM campaigns
                    WHERE (%(weeks)s::text[] IS NULL OR to_char(round_hour, 'IYYY-"W"IW') = ANY(%(weeks)s::text[]))
                      AND (%(vantages)s::text[] IS NULL OR vantage_id = ANY(%(vantages)s::text[]))),
        per AS (SELECT f.address, f.protocol, f.feature, bool_or(f.supported) AS supported
                  FROM resolver_features f JOIN c USING (campaign_id) GROUP BY 1, 2, 3)
        SELECT protocol, feature,
               count(*) FILTER (WHERE supported) AS supported,
               count(*) FILTER (WHERE NOT supported) AS unsupported,
               count(*) FILTER (WHERE supported IS NULL) AS unknown
          FROM per GROUP BY 1, 2 ORDER BY 1, 2""", _params(weeks, vantages))


@_on_lake
def per_resolver_medians(conn, weeks=None, vantages=None, phase: str = "measured", mode: str = "fresh",
                         refresh: bool = True) -> pd.DataFrame:
    """Per vantage point, protocol and resolver: the medians (percentile_cont) of its
    successful queries' resolve and handshake times and of their RTTs (the median RTT of
    the same campaign, address, transport and port, as in response_times), over every
    campaign and key share selected, for one phase and connection mode. Every answering
    resolver counts, with or without an RTT (rtt_ns NULL then): `resolvers` per vantage
    point and protocol are the resolvers the database holds answers from.

    Columns vantage_id, protocol, address (str), queries, resolve_ns, handshake_ns,
    rtt_ns. One row per (vantage, protocol, resolver): small next to the measurements,
    and what stats.vantage_comparison pairs across vantage points."""
    p = _params(weeks, vantages, dox_protocols=names.DOX_PROTOCOLS, require_rtt=False, dox_only=False,
                phase=phase, mode=mode)
    sql = "WITH " + _CAMPAIGNS_CTE + _rtt_for(conn, weeks, vantages, refresh, p) + """
        SELECT vantage_id, protocol, host(address) AS address, count(*) AS queries,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY resolve_ns) AS resolve_ns,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY handshake_ns) AS handshake_ns,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY rtt_ns) AS rtt_ns
          FROM paired
         WHERE phase = %(phase)s AND mode = %(mode)s
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"""
    df = _frame(conn, sql, p)
    for col in ("resolve_ns", "handshake_ns", "rtt_ns"):
        df[col] = df[col].astype(float)
    df["queries"] = df["queries"].astype(int)
    return df


PEER_COLUMNS = ["address", "peer", "class"]


def testbed_peers(path: str | os.PathLike | None = None) -> pd.DataFrame:
    """The third-party DoQ servers of the simulated internet: every population record
    with `peer=` (coredns, hickory, aioquic, ngtcp2, dnsproxy), from `path`, else
    $DOQSCAN_POPULATION, else <repo>/testbed/population.txt (read with the module
    population). Columns address (a record's first address), peer, class; address
    order, IPv4 first. Empty when the file or bin/simserver (which parses the file) is
    not there (an installation without the testbed)."""
    from . import population
    file = path or os.environ.get("DOQSCAN_POPULATION") or population.REPO / "testbed" / "population.txt"
    if not os.path.exists(file) or not population.SIMSERVER.exists():
        return pd.DataFrame(columns=PEER_COLUMNS)
    pop = population.load(file)
    rows = [(h.first, h.peer, h.cls) for h in pop.hosts + pop.hosts6 if h.peer]
    return pd.DataFrame(rows, columns=PEER_COLUMNS)


def peer_response_times(conn, peers: pd.DataFrame, facts: Facts | None = None, weeks=None, vantages=None,
                        refresh: bool = True) -> pd.DataFrame:
    """response_times of each address of `peers` (testbed_peers) on its own, grouped by
    vantage point, protocol, phase and mode, with an `address` column; every answering
    peer, DoX or not. Empty when the data holds no measurement of any of them."""
    if peers.empty:
        return pd.DataFrame()
    f = facts if facts is not None else measurement_facts(conn, weeks, vantages, refresh)
    parts = []
    for addr in peers["address"]:
        rt = response_times(conn, facts=f, addresses=[addr], group_by=("vantage_id", "protocol", "phase", "mode"))
        if len(rt):
            parts.append(rt.assign(address=addr))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


BENCH_COLUMNS = ["bench_id", "started_at", "label", "series", "target", "protocol", "variant", "address", "port",
                 "policy", "load", "workers", "elapsed_s", "sent", "answered", "qps", "success_rate",
                 "latency_mean_ms", "latency_p50_ms", "latency_p99_ms", "total_mean_ms", "total_p50_ms",
                 "path_loss", "seconds"]

# dnsbench.Sweep appends " loss=P%" to a run's label at each loss level; without it the
# label names the series (the sweep, or the policy comparison) the run belongs to.
_LOSS_TOKEN = re.compile(r"(?:^|\s)loss=\S+%")


@_on_lake
def bench_runs(conn, weeks=None) -> pd.DataFrame:
    """dnsbench runs (bench_runs, migration 0009), one row per stored run of one target,
    in start order. Columns: bench_id, started_at, label, series (the label without the
    " loss=P%" a loss sweep adds), target (dnsbench's "proto://addr:port"), protocol,
    variant, address, port, policy, load, workers, elapsed_s, sent, answered, qps,
    success_rate, latency_mean_ms (resolve time of the answered queries; NaN without
    any), latency_p50_ms, latency_p99_ms, total_mean_ms and total_p50_ms (issue to
    answer, session set-up included: the cold query latency of the fresh policy),
    path_loss (the per-direction loss a sweep set on the path, NaN outside a sweep) and
    seconds (rows of its bench_samples timeline). weeks: ISO weeks of started_at (UTC);
    None = all. Empty (with these columns) when the database has no bench_runs table
    or no run."""
    if not _has(conn, "bench_runs"):
        return pd.DataFrame(columns=BENCH_COLUMNS)
    df = _frame(conn, """
        SELECT r.bench_id, r.started_at, r.label, coalesce(r.report->>'target', '') AS target, r.protocol,
               r.variant, host(r.address) AS address, r.port, r.policy, r.load, r.workers, r.elapsed_s,
               r.sent, r.answered, r.qps, r.success_rate,
               CASE WHEN r.answered > 0 THEN r.latency_mean_ms END AS latency_mean_ms,
               CASE WHEN r.answered > 0 THEN r.latency_p50_ms END AS latency_p50_ms,
               CASE WHEN r.answered > 0 THEN r.latency_p99_ms END AS latency_p99_ms,
               CASE WHEN r.answered > 0 THEN r.total_mean_ms END AS total_mean_ms,
               CASE WHEN r.answered > 0 THEN (r.report->'total'->>'p50_ms')::float8 END AS total_p50_ms,
               (r.report->>'path_loss')::float8 AS path_loss,
               (SELECT count(*) FROM bench_samples s WHERE s.bench_id = r.bench_id) AS seconds
          FROM bench_runs r
         WHERE %(weeks)s::text[] IS NULL
            OR to_char(r.started_at AT TIME ZONE 'UTC', 'IYYY-"W"IW') = ANY(%(weeks)s::text[])
         ORDER BY r.started_at, r.bench_id""", _params(weeks, None))
    if df.empty:
        return pd.DataFrame(columns=BENCH_COLUMNS)
    df["series"] = [_LOSS_TOKEN.sub("", lab).strip() for lab in df["label"]]
    for col in ("latency_mean_ms", "latency_p50_ms", "latency_p99_ms", "total_mean_ms", "total_p50_ms",
                "path_loss", "qps", "success_rate", "elapsed_s"):
        if col in df:
            df[col] = df[col].astype(float)
    return df[BENCH_COLUMNS]
