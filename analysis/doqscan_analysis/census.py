"""The weekly census: DoQ-verified resolvers by DoQ/QUIC version pair, address family,
port, advertised QUIC versions and stack fingerprint, leaf certificate and provider,
week-over-week membership, and location (scans, verification_results, resolver_geo).

A resolver (address) is verified in a week when any vantage point's verification run
of that week verified it; it counts once per week, under its preferred DoQ port
(PORT_PREFERENCE).
"""

from __future__ import annotations

import pandas as pd

from . import names
from .source import _frame, _has, _on_lake, _params

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
