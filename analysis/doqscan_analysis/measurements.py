"""The hourly measurements: exact distributions of resolve time, RTT, handshake time
and handshake-to-RTT ratio (response_times from the facts, response_times_sql all in
SQL), handshakes in whole round trips, resolvers answering per protocol, DoQ
handshake causes, resolver features, per-resolver medians, and the testbed's peers."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from . import names
from .census import _FINGERPRINT_SQL, _fp_label
from .facts import _ADDR_HI, _ADDR_LO, CAUSES, Facts, address_key, measurement_facts
from .names import DEFAULT_POINTS, GROUP_COLUMNS, METRICS, ROUND_TRIP_CLASSES
from .rtt import _CAMPAIGNS_CTE, _rtt_for
from .source import _frame, _on_lake, _params


def _probs(points: int) -> list[float]:
    return [k / points for k in range(1, points + 1)]



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


@_on_lake
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
