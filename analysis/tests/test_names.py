"""Go and Python name QUIC versions alike: the examples in quic_versions.json carry
Go's quicver.Name and FamilyOf (internal/quicver/shared_test.go keeps the file current)."""

import ast
import json
import pathlib
import re

import pytest

from doqscan_analysis import names

TABLE = json.loads(names.QUIC_VERSIONS_FILE.read_text())


@pytest.mark.parametrize("ex", TABLE["examples"], ids=lambda ex: f"0x{ex['value']:08x}")
def test_short_name_and_family_match_go(ex):
    assert names.quic_version_short(ex["value"]) == ex["name"]
    assert names.quic_version_family(ex["value"]) == ex["family"]


def test_known_versions_round_trip():
    assert TABLE["known"], "empty version table"
    for k in TABLE["known"]:
        assert names.KNOWN_VERSIONS[k["name"]] == k["value"]
        assert names.quic_version_short(k["value"]) == k["name"]


def test_labels_prefix_short_names():
    assert names.quic_version_name(1) == "QUIC v1"
    assert names.quic_version_name(0xFF00001D) == "QUIC draft-29"
    assert names.quic_version_name(0x51303530) == "gQUIC Q050"
    assert names.quic_version_name(0x1A2A3A4A) == "grease"
    assert names.quic_version_name(None) == "unknown"


# ---------------------------------------------------------------------------------------
# One table: the package's SQL takes protocol and port lists from names, never spells them.

PKG = pathlib.Path(names.__file__).resolve().parent
_SQL = re.compile(r"\b(SELECT|WHERE|WHEN|JOIN|ORDER BY|GROUP BY)\b")
_P = "'(?:" + "|".join(map(re.escape, names.PROTOCOLS)) + ")'"
_T = "'(?:" + "|".join(sorted(set(names.PROTOCOL_TRANSPORT.values()))) + ")'"
_PROTO_LIST = re.compile(_P + r"\s*,\s*" + _P)  # IN ('doq', 'doh3'), ARRAY['doq', ...]
_PROTO_WHEN = re.compile(r"\bWHEN\s+" + _P + r"\s+THEN\b")  # CASE protocol WHEN 'doq' THEN ...
_PROTO_TRANSPORT = re.compile(r"\bWHEN\s+" + _P + r"\s+THEN\s+" + _T)
_PORT_ORDER = re.compile(r"\b" + r"\b.{1,40}?\b".join(map(str, names.PORT_PREFERENCE)) + r"\b", re.S)


def _sql_strings(tree: ast.AST):
    """(line, text) of every string constant that reads as SQL, f-string parts included;
    docstrings are prose."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and _SQL.search(n.value):
            yield n.lineno, n.value


def hand_spelled(text: str) -> list[str]:
    """What in one SQL string copies a table of names by hand."""
    out = []
    if _PROTO_LIST.search(text):
        out.append(f"a list of protocols: {_PROTO_LIST.search(text).group(0)} (names.sql_list)")
    if len(_PROTO_WHEN.findall(text)) >= 2 or _PROTO_TRANSPORT.search(text):
        out.append("a CASE over protocols, e.g. their transport (names.sql_case, names.sql_transport)")
    if _PORT_ORDER.search(text):
        out.append(f"the DoQ port preference {names.PORT_PREFERENCE} (names.sql_port_rank)")
    return out


@pytest.mark.parametrize("text", [
    "WHERE m.protocol IN ('doq', 'doh3')",
    "SELECT CASE ok.protocol WHEN 'doudp' THEN 'udp' ELSE 'tcp' END",
    "ORDER BY array_position(ARRAY[853, 784, 8853], port) NULLS LAST",
    "ORDER BY CASE port WHEN 853 THEN 1 WHEN 784 THEN 2 WHEN 8853 THEN 3 ELSE 4 END",
])
def test_hand_spelled_lists_are_found(text):
    assert hand_spelled(text)


@pytest.mark.parametrize("text", [
    "WHERE m.protocol = 'doq' AND m.status = 'ok'",
    "SELECT CASE WHEN protocol = 'doq' THEN alpn WHEN protocol = 'doh' THEN 'h2' END",
    "WHERE port IN (784, 8853) ORDER BY port",
])
def test_single_names_are_not_lists(text):
    assert not hand_spelled(text)


def test_package_sql_spells_no_protocol_list():
    """No SQL string of the package spells a list of protocols, a protocol-to-transport
    map or the DoQ port preference: they come from names (PROTOCOLS, PROTOCOL_TRANSPORT,
    PORT_PREFERENCE, ...) through names.sql_*."""
    found = []
    for f in sorted(PKG.glob("*.py")):
        if f.name == "names.py":
            continue
        for line, text in _sql_strings(ast.parse(f.read_text(), str(f))):
            found += [f"{f.name}:{line}: {what}" for what in hand_spelled(text)]
    assert found == []


def test_sql_spellings_follow_the_tables():
    assert names.sql_list(names.protocols_over("quic")) == "('doq', 'doh3')"
    assert names.sql_transport("p") == ("CASE p " + " ".join(
        f"WHEN '{k}' THEN '{v}'" for k, v in names.PROTOCOL_TRANSPORT.items()) + " END")
    assert names.sql_port_rank("port") == "CASE port WHEN 853 THEN 1 WHEN 784 THEN 2 WHEN 8853 THEN 3 ELSE 4 END"
    assert names.sql_list(["it's"]) == "('it''s')"
    with pytest.raises(TypeError):
        names.sql_literal(1.5)
