"""Measurement facts: one compact record per successful measurement of a selection,
fetched once and shared by answering(), response_times() and doq_causes()
(measurements.py). PostgreSQL only filters and pairs each measurement with its RTT;
the DoX set, address numbering and grouping happen in numpy (~46 bytes a measurement
in memory). Finished campaigns are read from the measurement_facts cache (migration
0003), the others from one scan of measurements per part, PARALLEL at a time.
"""

from __future__ import annotations

import ipaddress
import os

import numpy as np
import psycopg

from . import names
from .rtt import _CACHE_VALID, _RTT_MEDIAN_SQL, _refill, has_rtt_medians, refresh_rtt_medians
from .source import _on_lake, _params

# Connections measurement_facts may use at once (one scan per core; the machine has 2).
PARALLEL = int(os.environ.get("DOQSCAN_ANALYSIS_PARALLEL", "2"))
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

# Packed categories: protocol + P * (phase + H * (mode + M * (IPv6 + 2 * key share))),
# each an index into its domain; a value outside the domain gets the domain's length
# (schema.sql's CHECKs exclude that for protocol, phase and mode: an error if seen; an
# unknown key share makes measurement_facts look its name up). The radices P, H, M are
# the domains' lengths + 1, read from names when the query is made (_radices).
_R_FAM = 2


def _radices() -> tuple[int, int, int]:
    """(P, H, M): one more than the number of protocols, phases and modes in names."""
    return len(names.PROTOCOLS) + 1, len(_PHASES) + 1, len(_MODES) + 1

# Key shares the measure tool writes (internal/measure: --key-shares); '' for protocols
# without one. Others are found in the data (campaign config, column statistics, and a
# last query only when a row has a key share none of these name).
_KNOWN_KEY_SHARES = ["", "x25519", "x25519mlkem768"]

# handshake_analyses.cause values (schema.sql's CHECK); facts store 1 + the index, 0 for
# a measurement without an analysis (only QUIC measurements have one).
CAUSES = names.CAUSES
_CAUSE_EXPR = """COALESCE(CASE WHEN m.protocol IN """ + names.sql_list(names.protocols_over("quic")) + """
                   THEN array_position(%(causes)s::text[],
                   (SELECT ha.cause FROM handshake_analyses ha
                     WHERE ha.measurement_id = m.measurement_id AND ha.round_hour = m.round_hour)) END,
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
    rp, rph, rm = _radices()
    fmt = dict(np=len(names.PROTOCOLS), rp=rp, nph=len(_PHASES), rph=rph, nm=len(_MODES), rm=rm, rf=_R_FAM)
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
 WHERE m.campaign_id = ANY(%(ids)s::bigint[]) AND m.round_hour = ANY(%(hours)s::timestamptz[])
   AND m.status = 'ok' AND m.rcode IS NOT NULL
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
    rp, rph, rm = _radices()
    g = rec["g"].astype(np.int32)
    out = {"protocol": (g % rp).astype(np.int8)}
    g //= rp
    out["phase"] = (g % rph).astype(np.int8)
    g //= rph
    out["mode"] = (g % rm).astype(np.int8)
    g //= rm
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
    (the raw stream is never held whole: ~82 bytes a row raw, ~46 decoded).

    Kept against psycopg's own rows (bench/facts_bench.py: a server-side binary cursor,
    one column per field, fetchmany batches into numpy) because it was faster and
    smaller: PostgreSQL streams the COPY while this decodes and may run it as a
    parallel query, where a cursor alternates fetches and conversion and never runs in
    parallel (a client-side cursor would hold the whole result: twice the peak RSS).
    On ~10^6 measurements, the methods alternating on 2 cores shared with other work
    (load 6-20, which moved the figures as much as the method did): measurement_facts
    as the report calls it on a database whose cache it may not write (2 connections)
    1.56x, 1.69x and 1.05x as fast in three runs (best 19.1 s against 29.8 s, 16.7
    against 28.2, 16.0 against 16.7), 9.2x on 27,274 measurements (0.17 s against
    1.55 s); one part alone 0.56x-2.23x; peak RSS 0.72-0.77x (~300 MB against ~410 MB),
    client CPU 2.2-2.5 s against 3.5-3.8 s. Reproduce:
    `nice -n 10 .venv/bin/python bench/facts_bench.py --hours 24 --scale 12`."""
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
