"""Seeded synthetic doqscan database from known parameters.

The generator fills schema.sql's tables inside PostgreSQL with ``generate_series`` (a
10-million-measurement database takes minutes, not hours) from a `Spec`: how many
resolvers each DoQ/QUIC version pair has per week, how the window of resolvers slides
(churn), DoQ port shares, countries, certificates, VN version lists (stack fingerprints),
per-resolver RTTs, which resolvers answer on all five protocols (DoX), and the classes of
DoQ handshakes (1, 2, 3, 4 round trips, with their causes) in known proportions.

`expected(spec)` derives the figures the analysis must reproduce (resolvers per pair and
week, port shares, retention, continents, DoX count, DoQ round-trip classes) from the
spec alone, by plain Python over the same integer rules, never from the database.

Rules (all integer arithmetic on a resolver's index `i` within its pair's block):
  week w of pair p:   i in [shift_p * w, shift_p * w + counts_p[w])
  address:            198.18.0.0 + 8192 * p + i   (blocks of 8192; DoUDP uses block 15,
                      other QUIC hosts block 14, DoQ-without-ALPN hosts block 13)
  DoQ port:           h = (37 * i) % 100: 784 if h < port_pct[784], then 853, then 8853;
                      and every i % dual_every == 0 whose port is not 853 answers on 853 too
  country:            COUNTRIES[(7 * i + 3 * p) % len(COUNTRIES)]
  DoX (5 protocols):  (13 * i + p) % 100 < dox_pct, among the measured targets
  DoQ class of a measured handshake in campaign c with key share k:
                      (29 * i + 17 * c + 41 * k + p) % 100 against the cumulative
                      doq_classes percentages
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass, field

import psycopg

from . import names

COUNTRIES = [  # (ISO country, continent, latitude, longitude)
    ("DE", "EU", 51.2, 10.4), ("FR", "EU", 46.6, 2.2), ("RU", "EU", 55.7, 37.6),
    ("CN", "AS", 35.0, 105.0), ("JP", "AS", 36.2, 138.3), ("SG", "AS", 1.35, 103.8),
    ("US", "NA", 39.8, -98.6), ("CA", "NA", 56.1, -106.3), ("BR", "SA", -14.2, -51.9),
    ("AU", "OC", -25.3, 133.8), ("ZA", "AF", -30.6, 22.9),
]
BLOCK = 8192
BASE = ipaddress.IPv4Address("198.18.0.0")
DOUDP_BLOCK = 15
OTHER_QUIC_BLOCK = 14
NO_ALPN_BLOCK = 13
GREASE = 0x1A2A3A4A


@dataclass
class Pair:
    alpn: str
    quic_version: int
    counts: list[int]          # resolvers per week
    shift: int = 0             # window slide per week (churn)
    cn: str = ""               # leaf certificate subject CN (provider)
    vn_versions: list[int] = field(default_factory=lambda: [1, GREASE])


@dataclass
class Spec:
    seed: int = 1
    first_monday: dt.date = dt.date(2026, 9, 28)   # 2026-W40
    pairs: list[Pair] = field(default_factory=list)
    port_pct: dict[int, int] = field(default_factory=lambda: {784: 70, 853: 10, 8853: 20})
    dual_every: int = 25
    doudp_counts: list[int] = field(default_factory=list)
    doudp_shift: int = 0
    refused_every: int = 10    # DoUDP replies with i % refused_every == 9 are REFUSED
    other_quic: int = 5        # QUIC hosts per week that are not DoQ
    no_alpn: int = 2           # QUIC hosts per week that answer DNS only without ALPN (doq-no-alpn)
    # Measurements
    vantages: list[str] = field(default_factory=lambda: ["synth-a"])
    hours: int = 4
    targets: int | None = None  # measured resolvers: the last week's first N (None: all)
    dox_pct: int = 60
    key_shares: list[str] = field(default_factory=lambda: ["x25519"])
    doq_modes: list[str] = field(default_factory=lambda: ["resumed", "0rtt", "persistent"])
    # (cause, round trips, percent) for measured fresh DoQ handshakes; warm-ups take one
    # round trip more (a Retry).
    doq_classes: list[tuple[str, int, int]] = field(default_factory=lambda: [
        ("1rtt", 1, 25), ("amplification", 2, 50), ("loss", 3, 15), ("multiple", 4, 10)])
    rtt_median_ms: float = 60.0
    rtt_sigma: float = 0.8
    timeouts_every: int = 10   # in campaign 0, resolvers with i % timeouts_every == 3 time out on DoT

    @property
    def weeks(self) -> list[str]:
        n = max(len(p.counts) for p in self.pairs)
        out = []
        for w in range(n):
            y, wk, _ = (self.first_monday + dt.timedelta(weeks=w)).isocalendar()
            out.append(f"{y}-W{wk:02d}")
        return out


def default_spec(**kw) -> Spec:
    """A small spec shaped like the study's 2021/22 population (a few hundred resolvers)."""
    s = Spec(**kw)
    if not s.pairs:
        s.pairs = [
            Pair("doq-i02", 0xFF000022, [120, 125, 130, 90, 60], shift=6, cn="agh.example",
                 vn_versions=[0xFF000022, 0xFF000020, 0xFF00001D, GREASE]),
            Pair("doq-i02", 0x00000001, [20, 30, 60, 110, 160], shift=2, cn="agh.example",
                 vn_versions=[1, 0x6B3343CF, GREASE]),
            Pair("doq-i02", 0xFF00001D, [40, 40, 40, 40, 40], shift=0, cn="dns.nextdns.example",
                 vn_versions=[GREASE, 1, 0xFF00001D]),
            Pair("doq-i03", 0x00000001, [10, 12, 12, 14, 15], shift=1, cn="dns.adguard.example",
                 vn_versions=[1, 0xFF00001D, 0xFF000020, 0xFF000022, GREASE]),
            Pair("doq", 0x00000001, [3, 5, 8, 13, 21], shift=0, cn="resolver.rfc9250.example",
                 vn_versions=[1, 0x6B3343CF, GREASE]),
        ]
    if not s.doudp_counts:
        s.doudp_counts = [400, 400, 400, 400, 400]
        s.doudp_shift = 3
    return s


# ----------------------------------------------------------------------------------
# Ground truth from the spec (plain Python).

def _port_of(spec: Spec, i: int) -> int:
    h = (37 * i) % 100
    if h < spec.port_pct.get(784, 0):
        return 784
    if h < spec.port_pct.get(784, 0) + spec.port_pct.get(853, 0):
        return 853
    return 8853


def _ports_of(spec: Spec, i: int) -> list[int]:
    p = _port_of(spec, i)
    return [p, 853] if (spec.dual_every and i % spec.dual_every == 0 and p != 853) else [p]


def _address(block: int, i: int) -> str:
    return str(BASE + block * BLOCK + i)


def _members(spec: Spec, w: int):
    for pi, p in enumerate(spec.pairs):
        n = p.counts[w] if w < len(p.counts) else 0
        for i in range(p.shift * w, p.shift * w + n):
            yield pi, i


def _targets(spec: Spec):
    last = len(spec.weeks) - 1
    t = sorted(_members(spec, last))
    return t[: spec.targets] if spec.targets is not None else t


def expected(spec: Spec) -> dict:
    """The figures the analysis must find, derived from the spec."""
    weeks = spec.weeks
    out: dict = {"weeks": weeks, "pairs": {}, "port_resolvers": {}, "totals": {},
                 "continents_last": {}, "providers": {}}
    sets = []
    for w, wk in enumerate(weeks):
        members = list(_members(spec, w))
        sets.append({(pi, i) for pi, i in members})
        out["totals"][wk] = len(members)
        for pi, i in members:
            p = spec.pairs[pi]
            key = (wk, p.alpn, p.quic_version)
            out["pairs"][key] = out["pairs"].get(key, 0) + 1
            out["providers"][(wk, p.cn)] = out["providers"].get((wk, p.cn), 0) + 1
            for port in _ports_of(spec, i):
                out["port_resolvers"][(wk, port)] = out["port_resolvers"].get((wk, port), 0) + 1
    last = len(weeks) - 1
    for pi, i in _members(spec, last):
        cont = COUNTRIES[(7 * i + 3 * pi) % len(COUNTRIES)][1]
        out["continents_last"][cont] = out["continents_last"].get(cont, 0) + 1
    out["doq_retention"] = len(sets[0] & sets[-1]) / len(sets[0]) if sets[0] else float("nan")
    ud = []
    for w in range(len(weeks)):
        n = spec.doudp_counts[w] if w < len(spec.doudp_counts) else 0
        ud.append({i for i in range(spec.doudp_shift * w, spec.doudp_shift * w + n)
                   if not (spec.refused_every and i % spec.refused_every == 9)})
    out["doudp_retention"] = len(ud[0] & ud[-1]) / len(ud[0]) if ud and ud[0] else float("nan")
    # Verification outcomes: addresses per (week, outcome)
    out["outcomes"] = {}
    for wk in weeks:
        for outcome, n in (("doq-verified", out["totals"][wk]), ("quic-not-doq", spec.other_quic),
                           ("doq-no-alpn", spec.no_alpn)):
            if n:
                out["outcomes"][(wk, outcome)] = n
    # Measurements
    targets = _targets(spec)
    out["targets"] = len(targets)
    out["dox"] = sum(1 for pi, i in targets if (13 * i + pi) % 100 < spec.dox_pct)
    classes: dict = {}
    cum = []
    acc = 0
    for cause, rt, pct in spec.doq_classes:
        acc += pct
        cum.append((acc, cause, rt))
    for v in spec.vantages:
        for c in range(spec.hours):
            for pi, i in targets:
                for k, _ in enumerate(spec.key_shares):
                    h = (29 * i + 17 * c + 41 * k + pi) % 100
                    cause, rt = next((cz, r) for lim, cz, r in cum if h < lim)
                    classes[(v, rt)] = classes.get((v, rt), 0) + 1
    out["doq_round_trips"] = classes  # measured fresh DoQ handshakes per (vantage, round trips)
    out["doq_cause_pct"] = {cause: pct for cause, _, pct in spec.doq_classes}
    return out


# ----------------------------------------------------------------------------------
# Generation (SQL).

def _values(rows) -> str:
    def lit(v):
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, (list, tuple)):
            return "ARRAY[" + ",".join(lit(x) for x in v) + "]::bigint[]"
        return "'" + str(v).replace("'", "''") + "'"
    return ",\n".join("(" + ", ".join(lit(v) for v in r) + ")" for r in rows)


def generate(conn: psycopg.Connection, spec: Spec, progress=None) -> None:
    """Fill an empty doqscan database (schema.sql applied) from `spec`."""
    say = progress or (lambda msg: None)
    weeks = spec.weeks
    ex = conn.execute
    ex("SET synchronous_commit = off")
    ex("SET temp_buffers = '256MB'")
    for v in spec.vantages:
        ex("INSERT INTO vantage_points (vantage_id, description, country, latitude, longitude) "
           "VALUES (%s, 'synthetic vantage point', 'DE', 50.1, 8.7) ON CONFLICT DO NOTHING", (v,))
    adop = spec.vantages[0]
    ex("CREATE TEMP TABLE s_pairs (pi int, alpn text, qv bigint, shift int, cn text, vn bigint[])")
    ex("INSERT INTO s_pairs VALUES " + _values(
        [(pi, p.alpn, p.quic_version, p.shift, p.cn, p.vn_versions) for pi, p in enumerate(spec.pairs)]))
    ex("CREATE TEMP TABLE s_counts (w int, iso_week text, pi int, n int)")
    rows = [(w, wk, pi, p.counts[w] if w < len(p.counts) else 0)
            for w, wk in enumerate(weeks) for pi, p in enumerate(spec.pairs)]
    ex("INSERT INTO s_counts VALUES " + _values(rows))
    ex("CREATE TEMP TABLE s_countries (ci int, country text, continent text, lat float8, lon float8)")
    ex("INSERT INTO s_countries VALUES " + _values([(ci, *c) for ci, c in enumerate(COUNTRIES)]))
    p784, p853 = spec.port_pct.get(784, 0), spec.port_pct.get(853, 0)
    say("weekly scans and verification runs")
    for w, wk in enumerate(weeks):
        day = spec.first_monday + dt.timedelta(weeks=w)
        scan_id = ex("""INSERT INTO scans (iso_week, vantage_id, seed, ports, probe_version, started_at,
                                           finished_at, status)
                        VALUES (%s, %s, %s, ARRAY[53, 784, 853, 8853], 437918234, %s, %s, 'ok')
                        RETURNING scan_id""", (wk, adop, spec.seed, day, day)).fetchone()[0]
        run_id = ex("""INSERT INTO verification_runs (iso_week, vantage_id, scan_id, started_at, finished_at, status)
                       VALUES (%s, %s, %s, %s, %s, 'ok') RETURNING run_id""",
                    (wk, adop, scan_id, day, day)).fetchone()[0]
        # Member (pair, i, port) rows of this week.
        ex("DROP TABLE IF EXISTS s_week")
        ex("""CREATE TEMP TABLE s_week AS
              WITH m AS (
                SELECT c.pi, g AS i, p.alpn, p.qv, p.cn, p.vn,
                       CASE WHEN (37 * g) %% 100 < %(p784)s THEN 784
                            WHEN (37 * g) %% 100 < %(p784)s + %(p853)s THEN 853 ELSE 8853 END AS port
                  FROM s_counts c JOIN s_pairs p USING (pi)
                  CROSS JOIN LATERAL generate_series(p.shift * c.w, p.shift * c.w + c.n - 1) AS g
                 WHERE c.w = %(w)s)
              SELECT pi, i, alpn, qv, cn, vn, port,
                     '198.18.0.0'::inet + (8192 * pi + i) AS address FROM m
              UNION ALL
              SELECT pi, i, alpn, qv, cn, vn, 853, '198.18.0.0'::inet + (8192 * pi + i) FROM m
               WHERE %(dual)s > 0 AND i %% %(dual)s = 0 AND port <> 853""",
           {"p784": p784, "p853": p853, "w": w, "dual": spec.dual_every})
        ex("""INSERT INTO scan_replies (scan_id, port, address, sport, reply_kind, quic_versions, grease_count,
                                        vn_cid_match, payload_len, received_at, iso_week)
              SELECT %(s)s, port, address, port, 'quic-vn', vn,
                     (SELECT count(*) FROM unnest(vn) v WHERE (v & 252645135) = 168430090), true, 1252, %(t)s, %(wk)s
                FROM s_week
              UNION ALL
              SELECT %(s)s, 784, '198.18.0.0'::inet + (8192 * %(ob)s + g), 784, 'quic-vn',
                     ARRAY[1, 1785358954]::bigint[], 1, true, 1252, %(t)s, %(wk)s
                FROM generate_series(0, %(oq)s - 1) g
              UNION ALL
              SELECT %(s)s, 53, '198.18.0.0'::inet + (8192 * %(ub)s + g), 53, 'dns', NULL, NULL, NULL, 64, %(t)s, %(wk)s
                FROM generate_series(%(us)s, %(us)s + %(un)s - 1) g""",
           {"s": scan_id, "t": day, "wk": wk, "ob": OTHER_QUIC_BLOCK, "oq": spec.other_quic, "ub": DOUDP_BLOCK,
            "us": spec.doudp_shift * w, "un": spec.doudp_counts[w] if w < len(spec.doudp_counts) else 0})
        ex("""UPDATE scan_replies SET dns_rcode = CASE WHEN %(re)s > 0 AND
                    (address - ('198.18.0.0'::inet + 8192 * %(ub)s)) %% %(re)s = 9 THEN 5 ELSE 0 END,
                    dns_answers = 1, dns_ra = true
               WHERE scan_id = %(s)s AND port = 53""", {"s": scan_id, "ub": DOUDP_BLOCK, "re": spec.refused_every})
        ex("""INSERT INTO verification_results (run_id, address, port, outcome, quic_version, alpn, tls_version,
                                                handshake_ns, cert_chain, scan_versions, dns_rcode, dns_answers, verified_at)
              SELECT %(r)s, address, port, 'doq-verified', qv, alpn, 772, 50000000,
                     ARRAY[sha256(convert_to(cn, 'UTF8'))], CASE WHEN i %% 2 = 0 THEN vn END, 0, 1, %(t)s
                FROM s_week
              UNION ALL
              SELECT %(r)s, '198.18.0.0'::inet + (8192 * %(ob)s + g), 784, 'quic-not-doq', 1, NULL, 772,
                     NULL, NULL, ARRAY[1, 1785358954]::bigint[], NULL, NULL, %(t)s
                FROM generate_series(0, %(oq)s - 1) g
              UNION ALL
              SELECT %(r)s, '198.18.0.0'::inet + (8192 * %(nb)s + g), 853, 'doq-no-alpn', 1, '', 772,
                     50000000, NULL, NULL, 0, 1, %(t)s
                FROM generate_series(0, %(na)s - 1) g""",
           {"r": run_id, "t": day, "ob": OTHER_QUIC_BLOCK, "oq": spec.other_quic,
            "nb": NO_ALPN_BLOCK, "na": spec.no_alpn})
        ex("""INSERT INTO certificates (sha256, der, subject, subject_cn, sans, issuer, issuer_cn, key_type)
              SELECT DISTINCT sha256(convert_to(cn, 'UTF8')), convert_to('synthetic ' || cn, 'UTF8'), 'CN=' || cn, cn,
                     ARRAY[cn], 'CN=Synthetic CA', 'Synthetic CA', 'ecdsa'
                FROM s_week ON CONFLICT DO NOTHING""")
        ex("""INSERT INTO resolvers (address, first_seen, last_seen)
              SELECT DISTINCT address, %(t)s::timestamptz, %(t)s::timestamptz FROM s_week
              ON CONFLICT (address) DO UPDATE SET last_seen = EXCLUDED.last_seen""", {"t": day})
    say("geolocation")
    city = ex("""INSERT INTO datasets (kind, database_type, build_time, sha256, path)
                 VALUES ('geoip-city', 'Synthetic-City', %s, sha256('synthetic city'::bytea), 'synthetic')
                 ON CONFLICT (sha256) DO UPDATE SET path = EXCLUDED.path RETURNING dataset_id""",
              (spec.first_monday,)).fetchone()[0]
    asn = ex("""INSERT INTO datasets (kind, database_type, build_time, sha256, path)
                VALUES ('geoip-asn', 'Synthetic-ASN', %s, sha256('synthetic asn'::bytea), 'synthetic')
                ON CONFLICT (sha256) DO UPDATE SET path = EXCLUDED.path RETURNING dataset_id""",
             (spec.first_monday,)).fetchone()[0]
    ex("UPDATE verification_runs SET city_dataset = %s, asn_dataset = %s", (city, asn))
    ex("""INSERT INTO resolver_geo (address, city_dataset, asn_dataset, asn, as_org, country, continent, city,
                                    latitude, longitude)
          SELECT r.address, %(c)s, %(a)s, 64512 + co.ci, 'SYNTH-AS-' || co.country, co.country, co.continent, '',
                 co.lat + ((x.i %% 5) - 2) * 0.8, co.lon + ((x.i %% 7) - 3) * 0.8
            FROM resolvers r
            CROSS JOIN LATERAL (SELECT ((r.address - '198.18.0.0'::inet) / 8192)::int AS pi,
                                       ((r.address - '198.18.0.0'::inet) %% 8192)::int AS i) x
            JOIN s_countries co ON co.ci = (7 * x.i + 3 * x.pi) %% %(nc)s
          ON CONFLICT DO NOTHING""", {"c": city, "a": asn, "nc": len(COUNTRIES)})
    _generate_measurements(conn, spec, say)
    ex("ANALYZE")


def _generate_measurements(conn, spec: Spec, say) -> None:
    ex = conn.execute
    weeks = spec.weeks
    last = len(weeks) - 1
    start = dt.datetime.combine(spec.first_monday + dt.timedelta(weeks=last), dt.time(0), dt.UTC)
    # Targets: last week's members (pair, i), ordered, first N.
    ex("""CREATE TEMP TABLE s_targets AS
          SELECT pi, i, '198.18.0.0'::inet + (8192 * pi + i) AS address,
                 CASE WHEN (37 * i) %% 100 < %(p784)s THEN 784
                      WHEN (37 * i) %% 100 < %(p784)s + %(p853)s THEN 853 ELSE 8853 END AS doq_port,
                 qv, alpn, ((13 * i + pi) %% 100) < %(dox)s AS dox,
                 -- per-resolver base RTT: log-normal from two md5-derived uniforms (Box-Muller)
                 (%(med)s * 1e6 * exp(%(sig)s * sqrt(-2 * ln(greatest(u1, 1e-9))) * cos(2 * pi() * u2)))::bigint AS base_ns
            FROM (SELECT c.pi, g AS i, p.qv, p.alpn,
                         ('x' || substr(md5(%(seed)s::text || ':a:' || c.pi || ':' || g), 1, 8))::bit(32)::bigint / 4294967296.0 AS u1,
                         ('x' || substr(md5(%(seed)s::text || ':b:' || c.pi || ':' || g), 1, 8))::bit(32)::bigint / 4294967296.0 AS u2
                    FROM s_counts c JOIN s_pairs p USING (pi)
                    CROSS JOIN LATERAL generate_series(p.shift * c.w, p.shift * c.w + c.n - 1) AS g
                   WHERE c.w = %(last)s) t
           ORDER BY pi, i LIMIT %(lim)s""",
       {"p784": spec.port_pct.get(784, 0), "p853": spec.port_pct.get(853, 0), "dox": spec.dox_pct,
        "med": spec.rtt_median_ms, "sig": spec.rtt_sigma, "seed": spec.seed, "last": last,
        "lim": spec.targets})
    say("campaigns")
    ex("CREATE TEMP TABLE s_camps (campaign_id bigint, cnum int, vantage_id text, t timestamptz)")
    for v in spec.vantages:
        ex("""INSERT INTO campaigns (vantage_id, round_hour, planned, started_at, finished_at, status)
              SELECT %(v)s, %(s)s::timestamptz + make_interval(hours => g), (SELECT count(*) FROM s_targets),
                     %(s)s::timestamptz + make_interval(hours => g), %(s)s::timestamptz + make_interval(hours => g, mins => 5), 'ok'
                FROM generate_series(0, %(h)s - 1) g""", {"v": v, "s": start, "h": spec.hours})
    ex("""INSERT INTO s_camps SELECT campaign_id, extract(epoch FROM round_hour - %(s)s)::int / 3600, vantage_id, round_hour
            FROM campaigns WHERE round_hour >= %(s)s""", {"s": start})
    # The plan: (protocol, port kind, mode, phase, seq, key share index, handshake kind).
    # hs: 0 = none (DoUDP, persistent reuse), 1/2 = fixed round trips, -1 = DoQ class,
    # -2 = DoQ class + 1 (warm-up with Retry).
    plan = [("doudp", "53", "fresh", ph, 0, -1, 0, True) for ph in ("warmup", "measured")]
    plan += [("dotcp", "53", "fresh", ph, 0, -1, 1, True) for ph in ("warmup", "measured")]
    plan += [("dot", "853", "fresh", ph, 0, -1, 2, False) for ph in ("warmup", "measured")]
    plan += [("doh", "443", "fresh", ph, 0, -1, 2, True) for ph in ("warmup", "measured")]
    plan += [("doq", "doq", "fresh", "warmup", 0, 0, -2, False)]
    plan += [("doq", "doq", "fresh", "measured", 0, k, -1, False) for k in range(len(spec.key_shares))]
    for mode in spec.doq_modes:
        plan.append(("doq", "doq", mode, "measured", 1 if mode == "persistent" else 0, 0,
                     0 if mode == "persistent" else 1, False))
    ex("""CREATE TEMP TABLE s_plan (protocol text, portkind text, mode text, phase text, seq int, ks int,
                                   hs int, dox_only bool)""")
    ex("INSERT INTO s_plan VALUES " + _values(plan))
    ex("CREATE TEMP TABLE s_ks (ks int, name text)")
    ex("INSERT INTO s_ks VALUES " + _values([(-1, "")] + [(k, n) for k, n in enumerate(spec.key_shares)]))
    cum, acc = [], 0
    for cause, rt, pct in spec.doq_classes:
        acc += pct
        cum.append((acc, cause, rt))
    ex("CREATE TEMP TABLE s_class (lo int, hi int, cause text, rt int)")
    lo = 0
    crow = []
    for hi, cause, rt in cum:
        crow.append((lo, hi, cause, rt))
        lo = hi
    ex("INSERT INTO s_class VALUES " + _values(crow))
    say("measurements")
    # u(n): a cheap multiplicative hash in [0, 1) for per-row jitter (0..5 %).
    ex("""CREATE TEMP TABLE s_rows AS
        SELECT md5(c.campaign_id || '|' || host(t.address) || '|' || p.protocol || '|' || p.mode || '|' ||
                   p.phase || '|' || p.seq || '|' || p.ks)::uuid AS measurement_id,
               c.campaign_id, c.cnum, c.t, t.pi, t.i, t.address, t.base_ns, t.qv, t.alpn, p.protocol, p.mode,
               p.phase, p.seq, k.name AS key_share,
               CASE p.portkind WHEN 'doq' THEN t.doq_port ELSE p.portkind::int END AS port,
               CASE WHEN p.hs = -1 THEN cl.rt WHEN p.hs = -2 THEN cl.rt + 1 ELSE p.hs END AS hs_rt,
               CASE WHEN p.hs = -2 THEN CASE WHEN cl.rt = 1 THEN 'retry' ELSE 'multiple' END
                    WHEN p.hs = -1 THEN cl.cause WHEN p.protocol = 'doq' AND p.hs = 1 THEN '1rtt' END AS cause,
               (p.protocol = 'dot' AND c.cnum = 0 AND %(te)s > 0 AND t.i %% %(te)s = 3) AS failed,
               ((((c.campaign_id * 7919 + t.i * 104729 + p.seq * 31 + length(p.protocol || p.mode || p.phase) * 1299709
                  + p.ks * 15485863) * 2654435761) %% 4294967296) / 4294967296.0) AS u
          FROM s_camps c CROSS JOIN s_targets t JOIN s_plan p ON (t.dox OR NOT p.dox_only)
          JOIN s_ks k ON k.ks = p.ks
          LEFT JOIN s_class cl ON p.protocol = 'doq' AND
               (29 * t.i + 17 * c.cnum + 41 * greatest(p.ks, 0) + t.pi) %% 100 >= cl.lo AND
               (29 * t.i + 17 * c.cnum + 41 * greatest(p.ks, 0) + t.pi) %% 100 < cl.hi""",
       {"te": spec.timeouts_every})
    ex("""INSERT INTO measurements (measurement_id, campaign_id, address, protocol, port, mode, key_share, phase, seq,
                                    started_at, handshake_ns, resolve_ns, status, rcode, answers, tls_version,
                                    quic_version, alpn, token_received, token_used, retry_seen, resumed, used_0rtt,
                                    round_hour)
          SELECT measurement_id, campaign_id, address, protocol, port, mode, key_share, phase, seq,
                 t + make_interval(secs => (i % 600) + u),
                 CASE WHEN failed OR hs_rt = 0 THEN NULL ELSE (base_ns * hs_rt * (1 + 0.05 * u))::bigint END,
                 CASE WHEN failed THEN NULL ELSE (base_ns * (1 + 0.05 * u))::bigint + 200000 END,
                 CASE WHEN failed THEN 'timeout' ELSE 'ok' END,
                 CASE WHEN failed THEN NULL ELSE 0 END,
                 CASE WHEN failed THEN NULL ELSE ARRAY['192.0.2.1'] END,
                 CASE WHEN protocol IN """ + names.sql_list(names.TLS_PROTOCOLS) + """ THEN 772 END,
                 CASE WHEN protocol = 'doq' THEN qv END,
                 CASE WHEN protocol = 'doq' THEN alpn WHEN protocol = 'doh' THEN 'h2' END,
                 CASE WHEN protocol = 'doq' THEN true END,
                 CASE WHEN protocol = 'doq' THEN phase = 'measured' END,
                 CASE WHEN protocol = 'doq' THEN cause = 'retry' OR (phase = 'warmup') END,
                 CASE WHEN protocol IN """ + names.sql_list(names.TLS_PROTOCOLS) + """ THEN mode IN ('resumed', '0rtt') END,
                 CASE WHEN protocol = 'doq' THEN mode = '0rtt' END,
                 t
            FROM s_rows ORDER BY campaign_id""")  # a campaign's rows together, as measure writes them
    say("rtt samples")
    # RTT samples: three per (campaign, address, transport, port) the resolver is measured on;
    # UDP/53 probes go unanswered (as in the study).
    ex("""INSERT INTO rtt_samples (campaign_id, address, transport, port, seq, sent_at, rtt_ns, status, round_hour)
          SELECT k.campaign_id, k.address, k.transport, k.port, s.seq, k.t + make_interval(secs => 2 + s.seq),
                 CASE WHEN k.transport = 'udp' THEN NULL
                      ELSE (k.base_ns * (1 + 0.05 * ((((k.campaign_id * 7907 + k.i * 7901 + k.port * 13 + s.seq * 104723)
                            * 2654435761) % 4294967296) / 4294967296.0)))::bigint END,
                 CASE WHEN k.transport = 'udp' THEN 'timeout' ELSE 'ok' END, k.t
            FROM (SELECT c.campaign_id, c.t, t.address, t.i, t.base_ns, x.transport, x.port
                    FROM s_camps c CROSS JOIN s_targets t
                    CROSS JOIN LATERAL (VALUES ('udp', 53, true), ('tcp', 53, true), ('tcp', 853, false),
                                               ('tcp', 443, true), ('quic', t.doq_port, false))
                                        AS x(transport, port, dox_only)
                   WHERE t.dox OR NOT x.dox_only) k
           CROSS JOIN generate_series(0, 2) AS s(seq)
           ORDER BY k.campaign_id""")
    say("handshake analyses")
    ex("""INSERT INTO handshake_analyses (measurement_id, rtt_ns, ratio, round_trips, one_rtt, version_negotiation,
                                          retry, amplification_stall, loss, cause, round_hour)
          SELECT measurement_id, base_ns, hs_rt, hs_rt, cause = '1rtt', false, cause IN ('retry', 'multiple'),
                 cause IN ('amplification', 'multiple'), cause IN ('loss', 'multiple'), cause, t
            FROM s_rows WHERE protocol = 'doq' AND cause IS NOT NULL AND NOT failed""")
    ex("""INSERT INTO resolver_features (campaign_id, address, protocol, port, feature, supported)
          SELECT DISTINCT campaign_id, address, 'doq', port, '0rtt', (i % 4 = 0)
            FROM s_rows WHERE protocol = 'doq' AND cnum = 0""")
    ex("DROP TABLE s_rows")


# ----------------------------------------------------------------------------------
# A synthetic year written straight to Parquet (the benchmark of the release analysis).

def write_year(template: str, out: str, weeks: int = 52, first_monday: dt.date = dt.date(2025, 12, 29),
               hours_per_week: int = 168, progress=None) -> dict:
    """Write a release directory `out` of `weeks` ISO weeks of hourly campaigns, straight
    to Parquet with DuckDB, from `template`: a release written by `dataset export` of a
    database `generate` filled (one campaign). Every file has the export's columns and
    types (rows are the template's, re-keyed and jittered): each hour of each week
    repeats the template campaign's measurements, RTT samples, handshake analyses and
    features with a new campaign id, times shifted to the hour and every duration
    scaled by a per-row factor in [0.95, 1.05) derived from the row and the hour (the
    RTT median with the same factor as its resolver's samples); each week's scans and
    verification (with the identity tables: QUIC libraries, DDR, connection checks) are the
template's week (w mod its weeks) renamed. manifest.json lists
    every file with rows, bytes and SHA-256. Returns {table: rows}."""
    import hashlib
    import json as _json
    import os
    import shutil

    import duckdb

    say = progress or (lambda msg: None)
    tm = _json.load(open(os.path.join(template, "manifest.json")))
    sets = [s for s in tm["file_sets"] if not s["vantage_id"].startswith("_")]
    tweeks = sorted({s["iso_week"] for s in sets})
    vantage = sets[0]["vantage_id"]
    camp_set = next(s for s in sets if any(f["table"] == "campaigns" and f["rows"] > 0 for f in s["files"]))
    cdir = os.path.join(template, camp_set["iso_week"], vantage)
    db = duckdb.connect()
    db.execute("SET preserve_insertion_order = true")
    first_camp = db.execute(f"SELECT min(campaign_id), min(round_hour) FROM read_parquet('{cdir}/campaigns.parquet')").fetchone()
    os.makedirs(out, exist_ok=True)
    for f in tm["files"]:
        shutil.copy(os.path.join(template, f["path"]), os.path.join(out, f["path"]))
    manifest = {"format": "doqscan-release", "schema_version": tm["schema_version"], "docs": tm["docs"],
                "updated_at": tm["updated_at"], "optouts_excluded": 0, "files": tm["files"], "file_sets": []}
    totals: dict = {}
    copy = "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 262144)"
    # factor(key): a per-row jitter in [0.95, 1.05) from a hash of the key and the hour
    jit = "(0.95 + 0.1 * ((hash({key} || '|' || CAST(h AS VARCHAR)) % 1000000) / 1000000.0))"
    for w in range(weeks):
        monday = first_monday + dt.timedelta(weeks=w)
        y, wk, _ = monday.isocalendar()
        week = f"{y}-W{wk:02d}"
        src = os.path.join(template, tweeks[w % len(tweeks)], vantage)
        dst = os.path.join(out, week, vantage)
        os.makedirs(dst, exist_ok=True)
        base_hour = dt.datetime.combine(monday, dt.time(0), dt.UTC)
        cid0 = 1_000_000 + w * hours_per_week
        hours = f"(SELECT h FROM range({hours_per_week}) t(h))"
        shift = f"(TIMESTAMPTZ '{base_hour.isoformat()}' - TIMESTAMPTZ '{first_camp[1].isoformat()}' + to_hours(CAST(h AS BIGINT)))"
        stmts = {
            "campaigns": f"""SELECT '{week}' AS iso_week, * EXCLUDE (iso_week, campaign_id, round_hour, started_at, finished_at),
                                    CAST({cid0} + h AS BIGINT) AS campaign_id, round_hour + {shift} AS round_hour,
                                    started_at + {shift} AS started_at, finished_at + {shift} AS finished_at
                               FROM read_parquet('{cdir}/campaigns.parquet'), {hours}""",
            "measurements": f"""SELECT '{week}' AS iso_week, * EXCLUDE (iso_week, campaign_id, measurement_id, started_at,
                                       handshake_ns, resolve_ns, rtt_median_ns),
                                       CAST({cid0} + h AS BIGINT) AS campaign_id,
                                       md5(measurement_id || '|' || CAST({cid0} + h AS VARCHAR)) AS measurement_id,
                                       started_at + {shift} AS started_at,
                                       CAST(handshake_ns * {jit.format(key='measurement_id')} AS BIGINT) AS handshake_ns,
                                       CAST(resolve_ns * {jit.format(key='measurement_id')} AS BIGINT) AS resolve_ns,
                                       rtt_median_ns * {jit.format(key="address || CAST(port AS VARCHAR)")} AS rtt_median_ns
                                  FROM read_parquet('{cdir}/measurements.parquet'), {hours}""",
            "rtt_samples": f"""SELECT '{week}' AS iso_week, * EXCLUDE (iso_week, campaign_id, sent_at, rtt_ns),
                                      CAST({cid0} + h AS BIGINT) AS campaign_id, sent_at + {shift} AS sent_at,
                                      CAST(rtt_ns * {jit.format(key="address || CAST(port AS VARCHAR)")} AS BIGINT) AS rtt_ns
                                 FROM read_parquet('{cdir}/rtt_samples.parquet'), {hours}""",
            "handshake_analyses": f"""SELECT '{week}' AS iso_week, * EXCLUDE (iso_week, campaign_id, measurement_id),
                                             CAST({cid0} + h AS BIGINT) AS campaign_id,
                                             md5(measurement_id || '|' || CAST({cid0} + h AS VARCHAR)) AS measurement_id
                                        FROM read_parquet('{cdir}/handshake_analyses.parquet'), {hours}""",
            "resolver_features": f"""SELECT '{week}' AS iso_week, * EXCLUDE (iso_week, campaign_id),
                                            CAST({cid0} + h AS BIGINT) AS campaign_id
                                       FROM read_parquet('{cdir}/resolver_features.parquet'), {hours}""",
        }
        files = []
        for t in ("scans", "scan_runs", "scan_replies", "verification_runs", "verification_results", "certificates",
                  "observed_certificates", "resolvers", "resolver_geo", "campaigns", "measurements", "rtt_samples",
                  "handshake_analyses", "resolver_features", "quic_stacks", "ddr_queries", "ddr_designations",
                  "policy_runs", "connection_policies", "amplification_probes"):
            if t not in stmts and not os.path.exists(os.path.join(src, t + ".parquet")):
                continue  # a template of schema version 1: no identity tables
            path = os.path.join(dst, t + ".parquet")
            cols = [r[0] for r in db.execute(f"DESCRIBE SELECT * FROM read_parquet('{src if t not in stmts else cdir}/{t}.parquet')").fetchall()]
            if t in stmts:
                q = stmts[t]
            else:
                q = f"SELECT '{week}' AS iso_week, * EXCLUDE (iso_week) FROM read_parquet('{src}/{t}.parquet')"
            # the export's column order and types
            types = dict(db.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet('{src if t not in stmts else cdir}/{t}.parquet'))").fetchall())
            sel = ", ".join(f'CAST("{c}" AS {types[c]}) AS "{c}"' for c in cols)
            db.execute(f"COPY (SELECT {sel} FROM ({q}) x) TO '{path}' {copy}")
            rows = db.execute(f"SELECT count(*) FROM read_parquet('{path}')").fetchone()[0]
            totals[t] = totals.get(t, 0) + rows
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            files.append({"path": f"{week}/{vantage}/{t}.parquet", "table": t, "rows": rows,
                          "bytes": os.path.getsize(path), "sha256": h.hexdigest()})
        manifest["file_sets"].append({"iso_week": week, "vantage_id": vantage, "fingerprint": "synthetic",
                                      "written_at": tm["updated_at"], "files": files})
        say(f"{week}: {files[10]['rows']:,} measurements")
    with open(os.path.join(out, "manifest.json"), "w") as f:
        _json.dump(manifest, f, indent=2)
    return totals
