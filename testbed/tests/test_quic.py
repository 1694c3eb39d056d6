"""DoQ and QUIC behaviour at every QUIC-speaking class, checked with clients that are not
ours: dnspython (DoQ queries), aioquic (handshakes: ALPN, Retry, NEW_TOKEN) and a raw
reserved-version Initial (Version Negotiation lists)."""

from __future__ import annotations

import expect
import pytest

from doqscan_analysis import population

POP = population.load()
REPS = {c: h for c, h in expect.representatives(POP).items() if h.quic}
ENDPOINTS = [(c, p) for c in sorted(REPS) for p in REPS[c].quic]
VN_ENDPOINTS = [(c, p) for c in sorted(REPS) for p in REPS[c].quic_ports()]
SNI_CLASSES = sorted(c for c, h in REPS.items() if h.sni)
HANDSHAKE = [c for c in sorted(REPS) if REPS[c].alpn]


def _ids(cases):
    return ["-".join(map(str, c)) if isinstance(c, tuple) else c for c in cases]


@pytest.fixture(scope="module")
def results(vantage):
    checks, keys = [], []
    for c, port in ENDPOINTS:
        h = REPS[c]
        keys.append(("doq", c, port))
        checks.append({"kind": "dns", "proto": "doq", "addr": h.first, "port": port, "sni": h.sni or None})
    for c, port in VN_ENDPOINTS:
        keys.append(("vn", c, port))
        checks.append({"kind": "vn", "addr": REPS[c].first, "port": port})
    for c in HANDSHAKE:
        h = REPS[c]
        keys.append(("hs", c))
        checks.append({"kind": "quic", "addr": h.first, "port": h.quic[0], "alpn": [h.alpn[0]], "sni": h.sni or None})
        wrong = "h3" if "h3" not in h.alpn else "doq"
        keys.append(("hs-wrong", c))
        checks.append({"kind": "quic", "addr": h.first, "port": h.quic[0], "alpn": [wrong], "sni": h.sni or None})
    for c in SNI_CLASSES:
        h = REPS[c]
        keys.append(("nosni", c))
        checks.append({"kind": "dns", "proto": "doq", "addr": h.first, "port": h.quic[0], "sni": None})
    silent = POP.silent_address()
    keys.append(("silent-vn",))
    checks.append({"kind": "vn", "addr": silent, "port": 784})
    return dict(zip(keys, vantage.run(checks)))


@pytest.mark.parametrize("cls,port", ENDPOINTS, ids=_ids(ENDPOINTS))
def test_doq_query(results, cls, port):
    """dnspython DoQ (ALPN doq, doq-i03) with the SNI the host needs. dnspython frames
    doq-i03 with the 2-byte length prefix, as draft-03 §5.2 does and internal/doq now
    serves it, so doq-i03-only hosts are queried too."""
    h = REPS[cls]
    got = results[("doq", cls, port)]
    want = expect.doq(h, h.sni or None)
    expect.check_answer(got, want, POP.answer, f"{h.first}:{port} ({cls}, line {h.line}) over DoQ")


@pytest.mark.parametrize("cls", SNI_CLASSES)
def test_sni_required(results, cls):
    """Without the SNI the population names, the DoQ exchange fails; with it, it works."""
    h = REPS[cls]
    assert not results[("nosni", cls)]["ok"], f"{h.first} ({cls}) answered without SNI {h.sni}"
    assert results[("doq", cls, h.quic[0])]["ok"], f"{h.first} ({cls}) failed with SNI {h.sni}: {results[('doq', cls, h.quic[0])]}"


@pytest.mark.parametrize("cls", HANDSHAKE)
def test_handshake_alpn(results, cls):
    """aioquic offering the host's first ALPN completes (and negotiates it); offering an
    ALPN the host lacks fails."""
    h = REPS[cls]
    got, wrong = results[("hs", cls)], results[("hs-wrong", cls)]
    where = f"{h.first}:{h.quic[0]} ({cls}, line {h.line})"
    if expect.handshake(h, h.alpn[0], h.sni or None):
        assert got["ok"], f"{where}: handshake with ALPN {h.alpn[0]} failed: {got.get('error')}"
        assert got["alpn"] == h.alpn[0], f"{where}: negotiated {got['alpn']}"
    else:
        assert not got["ok"], f"{where}: handshake completed, population says it must not: {got}"
    assert not wrong["ok"], f"{where}: handshake with an ALPN the host lacks completed: {wrong}"


@pytest.mark.parametrize("cls", HANDSHAKE)
def test_retry_and_token(results, cls):
    """Retry exactly where the population says retry=always; NEW_TOKEN exactly where it
    says token=honour|ignore (aioquic records both)."""
    h = REPS[cls]
    got = results[("hs", cls)]
    if not got["ok"]:
        pytest.skip(f"{cls}: no handshake to inspect ({got.get('error')}); see test_handshake_alpn")
    if h.retry_first:
        # retry=first (dnsproxy): Retry depends on whether this vantage's address was seen
        # within 30 minutes, which the earlier checks of this run decide; Go's e2e tests
        # assert it from a vantage the server has not seen. Only NEW_TOKEN is checked here.
        pass
    else:
        assert got["retry"] == h.retry, f"{h.first} ({cls}): Retry seen={got['retry']}, population retry={h.retry}"
    assert got["token"] == (h.token in ("honour", "ignore")), \
        f"{h.first} ({cls}): NEW_TOKEN seen={got['token']}, population token={h.token}"


@pytest.mark.parametrize("cls,port", VN_ENDPOINTS, ids=_ids(VN_ENDPOINTS))
def test_version_negotiation(results, cls, port):
    """A 1200-byte Initial with reserved version 0x1a2a3a4a gets a VN packet listing
    exactly the population's versions (grease aside); hostile kinds answer as documented."""
    h = REPS[cls]
    got = results[("vn", cls, port)]
    where = f"{h.first}:{port} ({cls}, line {h.line})"
    if h.hostile == "garbage":
        assert got["ok"] and not got["valid"], f"{where}: expected a non-VN reply, got {got}"
        return
    if h.hostile == "bad-vn":
        assert got["ok"] and not got["valid"], f"{where}: expected a malformed VN, got {got}"
        return
    assert got["ok"], f"{where}: no reply to the VN probe: {got.get('error')}"
    assert got["valid"], f"{where}: invalid VN: {got.get('why')} ({got.get('hex')})"
    listed = {v for v in got["versions"] if not expect.grease(v)}
    assert listed == set(h.version_numbers()), \
        f"{where}: VN lists {[hex(v) for v in sorted(listed)]}, population says {h.versions}"


def test_silent_no_vn(results):
    got = results[("silent-vn",)]
    assert not got["ok"], f"unassigned address answered the VN probe: {got}"
