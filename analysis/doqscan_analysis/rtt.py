"""RTTs paired with measurements: the campaigns selection, the median of each
(campaign, address, transport, port)'s answered RTT samples, kept in rtt_medians
(migration 0002) for finished campaigns, and the `paired` CTE the SQL distributions
read."""

from __future__ import annotations

import psycopg

from . import names
from .source import _params

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

# The cache's fill for the campaigns %(ids)s of the round hours %(hours)s (_refill).
_RTT_FILL = ("INSERT INTO rtt_medians (campaign_id, address, transport, port, rtt_ns, samples)"
             + _RTT_MEDIAN_SQL.format(extra=", count(*)", where="s.campaign_id = ANY(%(ids)s)"
                                      " AND s.round_hour = ANY(%(hours)s::timestamptz[])")
             + " ON CONFLICT DO NOTHING")

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
        _RTT_FILL,
        """INSERT INTO rtt_median_campaigns (campaign_id, keys)
           SELECT i, (SELECT count(*) FROM rtt_medians WHERE campaign_id = i)
             FROM unnest(%(ids)s::bigint[]) AS i
           ON CONFLICT DO NOTHING"""])


def campaign_hours(conn, ids: list[int]) -> list:
    """The round hours of the campaigns `ids`: a query that names them beside the
    campaign ids reads only their months' partitions of the time-partitioned tables
    (their partition key is round_hour), so its time does not grow with the months stored."""
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT round_hour FROM campaigns WHERE campaign_id = ANY(%(ids)s::bigint[])", {"ids": ids})]


def _refill(conn, todo: list[int], batch: int, statements: list[str], **params) -> int:
    """Recompute a per-campaign cache, `batch` campaigns of `todo` per transaction: the
    statements run in order with %(ids)s (the batch), %(hours)s (their round hours) and
    `params`. A connection that may
    not write the cache (read-only analyst) stops there; returns the campaigns done."""
    done = 0
    for i in range(0, len(todo), batch):
        ids = todo[i:i + batch]
        try:
            with conn.transaction():
                hours = campaign_hours(conn, ids)
                for sql in statements:
                    conn.execute(sql, {"ids": ids, "hours": hours, **params})
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
            return done
        done += len(ids)
    return done


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
