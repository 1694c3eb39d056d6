"""What the data is: its ISO weeks, vantage points, external datasets, the provenance
of every run, and where each vantage point's data comes from."""

from __future__ import annotations

import pandas as pd

from .source import _frame, _has, _on_lake, _params


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
