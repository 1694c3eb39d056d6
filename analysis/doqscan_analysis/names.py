"""Human-readable names for QUIC versions, DoQ ALPNs and protocols.

QUIC version numbers: RFC 9000 §15 (v1 = 0x00000001, reserved "greasing" versions
0x?a?a?a?a), RFC 9369 §3.1 (v2 = 0x6b3343cf), IETF drafts 0xff0000NN (draft-NN).
DoQ ALPNs: RFC 9250 §4.1.1 ("doq"), drafts "doq-iNN", AdGuard's pre-draft "dq"
(the same table as internal/doq).
"""

from __future__ import annotations

import json
from pathlib import Path

# The version table is Go's (internal/quicver), generated into quic_versions.json; the
# short names here equal quicver.Name on every value (analysis/tests/test_names.py).
QUIC_VERSIONS_FILE = Path(__file__).with_name("quic_versions.json")
_TABLE = json.loads(QUIC_VERSIONS_FILE.read_text())
KNOWN_VERSIONS = {k["name"]: k["value"] for k in _TABLE["known"]}  # name -> wire value
_KNOWN_NAMES = {v: n for n, v in KNOWN_VERSIONS.items()}
_VENDORS = [(x["value"], x["mask"], x["name"]) for x in _TABLE["vendors"]]

QUIC_V1 = KNOWN_VERSIONS["v1"]  # RFC 9000 §15
QUIC_V2 = KNOWN_VERSIONS["v2"]  # RFC 9369 §3.1
NEGOTIATION = 0x00000000  # the version field of a VN packet (RFC 9000 §17.2.1)
ALL_ONES = 0xFFFFFFFF  # the original study's probe version: reserved family
DRAFT_PREFIX = 0xFF000000  # 0xff0000NN = draft-NN (RFC 9000 §15 note)
GREASE_MASK = 0x0F0F0F0F  # RFC 9000 §15: versions 0x?a?a?a?a are reserved
GREASE_VALUE = 0x0A0A0A0A

# Protocols in the order the figures list them (schema.sql measurements.protocol).
PROTOCOLS = ["doudp", "dotcp", "dot", "doh", "doq", "doh3"]
# The study's "DoX" set: resolvers that answered on all of these (Sect. 4).
DOX_PROTOCOLS = ["doudp", "dotcp", "dot", "doh", "doq"]
PROTOCOL_LABELS = {
    "doudp": "DoUDP", "dotcp": "DoTCP", "dot": "DoT", "doh": "DoH", "doq": "DoQ", "doh3": "DoH3",
}
# Colours close to the study's Fig. 3 (DoTCP green, DoT grey, DoH magenta, DoQ cyan).
PROTOCOL_COLORS = {
    "doudp": "#1f77b4", "dotcp": "#2ca02c", "dot": "#7f7f7f", "doh": "#d62728",
    "doq": "#17becf", "doh3": "#9467bd",
}
# dnsbench's connection policies (bench_runs.policy) in the order tables list them, and
# their names in the report: "fresh" opens a new session for every query.
POLICIES = ["fresh", "persistent", "resumed", "0rtt"]
POLICY_LABELS = {"fresh": "new session", "persistent": "persistent", "resumed": "resumed", "0rtt": "0-RTT"}
# The transport an RTT sample must use to pair with a protocol's handshake.
PROTOCOL_TRANSPORT = {
    "doudp": "udp", "dotcp": "tcp", "dot": "tcp", "doh": "tcp", "doq": "quic", "doh3": "quic",
}
DOQ_PORTS = [784, 853, 8853]  # internal/doq: experimental, RFC 9250 §8.2, draft-02
# Order in which a resolver's DoQ port decides its version pair when it answers on
# several ports: the RFC 9250 port first, then the experimental port, then draft-02's.
PORT_PREFERENCE = [853, 784, 8853]
# The protocols whose session is TLS 1.3, over TCP or inside QUIC (measurements.tls_version).
TLS_PROTOCOLS = ["dot", "doh", "doq", "doh3"]
# The protocols whose cold (handshake + resolve) and warm (resolve) queries
# identity.cold_and_warm compares: the encrypted ones over a connection the measure tool
# opens fresh.
COLD_WARM_PROTOCOLS = ["doq", "dot", "doh"]
# The response-time figures (measurements.response_times and lake.response_times): the
# metrics whose distributions the report draws, the columns they are grouped by, the
# ranks at which distributions are returned (ECDF step <= 1/DEFAULT_POINTS), and the
# handshake round-trip classes (5 or more share the last class).
METRICS = ["resolve_ns", "rtt_ns", "handshake_ns", "ratio"]
GROUP_COLUMNS = ("vantage_id", "protocol", "phase", "mode", "key_share", "dox")
DEFAULT_POINTS = 2000
ROUND_TRIP_CLASSES = 5

# Value domains fixed by schema.sql's CHECK constraints: measurements.phase,
# measurements.mode and handshake_analyses.cause.
PHASES = ["warmup", "measured"]
MODES = ["fresh", "resumed", "0rtt", "persistent"]
CAUSES = ["1rtt", "retry", "version-negotiation", "amplification", "loss", "multiple", "unknown"]


def protocols_over(transport: str) -> list[str]:
    """The protocols (PROTOCOLS order) whose handshake runs over `transport` (udp, tcp,
    quic), from PROTOCOL_TRANSPORT."""
    return [p for p in PROTOCOLS if PROTOCOL_TRANSPORT[p] == transport]


# SQL spellings of the tables above, for the queries of load, lake and identity
# (PostgreSQL, DuckDB and Spark SQL alike): no query spells a protocol or port list
# itself (analysis/tests/test_names.py checks every SQL string of the package).

def sql_literal(v) -> str:
    """A string or integer as an SQL literal."""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise TypeError(f"sql_literal: {v!r} is neither a string nor an integer")
    return str(v) if isinstance(v, int) else "'" + v.replace("'", "''") + "'"


def sql_list(values) -> str:
    """('a', 'b'): the right side of IN."""
    values = list(values)
    if not values:
        raise ValueError("sql_list: an empty list")
    return "(" + ", ".join(sql_literal(v) for v in values) + ")"


def sql_case(col: str, mapping: dict, default=None) -> str:
    """CASE col WHEN k THEN v ... [ELSE default] END, one WHEN per entry of `mapping`."""
    whens = " ".join(f"WHEN {sql_literal(k)} THEN {sql_literal(v)}" for k, v in mapping.items())
    tail = "" if default is None else f" ELSE {sql_literal(default)}"
    return f"CASE {col} {whens}{tail} END"


def sql_rank(col: str, values) -> str:
    """The 1-based position of col in `values`, len(values) + 1 for any other value: an
    ORDER BY key that puts `values` first, in their order."""
    values = list(values)
    return sql_case(col, {v: i for i, v in enumerate(values, 1)}, len(values) + 1)


def sql_transport(col: str) -> str:
    """The RTT transport of the protocol in `col` (PROTOCOL_TRANSPORT); NULL for a value
    outside PROTOCOLS (schema.sql's CHECK allows none)."""
    return sql_case(col, PROTOCOL_TRANSPORT)


def sql_port_rank(col: str) -> str:
    """ORDER BY key of a DoQ port by PORT_PREFERENCE (other ports after them)."""
    return sql_rank(col, PORT_PREFERENCE)


def is_grease(version: int) -> bool:
    """True for a reserved version 0x?a?a?a?a (RFC 9000 §15)."""
    return (int(version) & GREASE_MASK) == GREASE_VALUE


def missing(x) -> bool:
    """None, or the NaN pandas puts in a numeric column for SQL NULL (imported lists
    record neither ALPN nor version)."""
    return x is None or (isinstance(x, float) and x != x)


def _google_tag(v: int):
    raw = v.to_bytes(4, "big")
    if raw[:1] in (b"Q", b"T") and all(0x30 <= b <= 0x39 for b in raw[1:]):
        return raw.decode()
    return None


def _vendor(v: int):
    for value, mask, name in _VENDORS:
        if v & mask == value:
            return name
    return None


def quic_version_short(version: int) -> str:
    """Go's quicver.Name: 'v1', 'v2', 'draft-29', 'grease', 'Q050', 'mvfst-d27',
    'negotiation' or the hex value."""
    v = int(version) & 0xFFFFFFFF
    if v == NEGOTIATION:
        return "negotiation"
    if v in _KNOWN_NAMES:
        return _KNOWN_NAMES[v]
    if is_grease(v):
        return "grease"
    if v & 0xFFFFFF00 == DRAFT_PREFIX:
        return f"draft-{v & 0xFF}"
    return _google_tag(v) or _vendor(v) or f"0x{v:08x}"


def quic_version_family(version: int) -> str:
    """Go's quicver.FamilyOf: ietf, draft, grease, google, vendor, reserved, unknown."""
    v = int(version) & 0xFFFFFFFF
    if v in (QUIC_V1, QUIC_V2):
        return "ietf"
    if is_grease(v):
        return "grease"
    if v in (NEGOTIATION, ALL_ONES):
        return "reserved"
    if v & 0xFFFFFF00 == DRAFT_PREFIX:
        return "draft"
    if _google_tag(v):
        return "google"
    if _vendor(v):
        return "vendor"
    return "unknown"


def quic_version_name(version) -> str:
    """The figures' label: 'QUIC v1', 'QUIC draft-29', 'gQUIC Q050', otherwise the short
    name ('grease', 'mvfst-d27', the hex value); 'unknown' when not recorded."""
    if missing(version):
        return "unknown"
    short = quic_version_short(version)
    family = quic_version_family(version)
    if family in ("ietf", "draft"):
        return f"QUIC {short}"
    if family == "google":
        return f"gQUIC {short}"
    return short


def doq_version_name(alpn) -> str:
    """'DoQ RFC 9250' for 'doq', 'DoQ draft-02' for 'doq-i02', 'DoQ dq' for 'dq'."""
    if missing(alpn) or alpn == "":
        return "unknown"
    if alpn == "doq":
        return "DoQ RFC 9250"
    if alpn.startswith("doq-i") and alpn[5:].isdigit():
        return f"DoQ draft-{int(alpn[5:]):02d}"
    if alpn == "dq":
        return "DoQ dq (AdGuard)"
    return f"ALPN {alpn}"


def pair_name(alpn, version) -> str:
    """The study's Fig. 1 legend entry: 'DoQ draft-02 / QUIC v1'."""
    return f"{doq_version_name(alpn)} / {quic_version_name(version)}"


def fingerprint_name(versions) -> str:
    """A stack fingerprint from the VN version list: names in packet order, grease kept
    as a token (where a stack puts its grease value is part of its fingerprint)."""
    if versions is None:
        return "no VN list"
    names = [quic_version_short(v) for v in versions]
    return ", ".join(names) if names else "empty VN list"
