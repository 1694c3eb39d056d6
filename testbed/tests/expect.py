"""What an independent client must observe at a population host (derived from the
population file's documented semantics, docs/population.md; never from fixed lists)."""

from __future__ import annotations

from doqscan_analysis.population import Host, Population

FAIL = "fail"  # the exchange must not yield a DNS answer (error, timeout, reset, garbage)

# dnspython's DoQ client offers exactly these ALPNs (dns/quic/_common.py).
DNSPYTHON_DOQ_ALPNS = ("doq", "doq-i03")


def representatives(pop: Population) -> dict[str, Host]:
    """One host per behaviour class (its first record)."""
    out: dict[str, Host] = {}
    for h in pop.hosts:
        out.setdefault(h.cls, h)
    return out


def dns(h: Host, proto: str) -> str:
    """Expected rcode (NOERROR/REFUSED/SERVFAIL) or FAIL for DoUDP/DoTCP/DoT/DoH."""
    served = {"udp": "udp" in h.dns, "tcp": "tcp" in h.dns, "dot": bool(h.dot), "doh": bool(h.doh),
              "doh3": bool(h.doh3)}[proto]
    if not served or h.hostile:
        return FAIL
    return h.rcode


def doq_alpn(h: Host, offered=DNSPYTHON_DOQ_ALPNS) -> str | None:
    """The ALPN the server picks: its first one the client offers (docs/population.md)."""
    for a in h.alpn:
        if a in offered:
            return a
    return None


def doq(h: Host, sni: str | None) -> str:
    """Expected rcode or FAIL of a dnspython DoQ query (QUIC v1, v2 after VN)."""
    if h.hostile or doq_alpn(h) is None or not ({"v1", "v2"} & set(h.versions)):
        return FAIL
    if h.sni and sni != h.sni:
        return FAIL
    return h.rcode


# alpn=none: the host accepts only a ClientHello without ALPN and refuses every offered
# protocol with no_application_protocol (docs/population.md).
NO_ALPN = "none"


def handshake(h: Host, alpn: str, sni: str | None) -> bool:
    """Whether a QUIC handshake offering one ALPN completes (aioquic: v1, v2 after VN)."""
    if h.hostile in ("garbage", "bad-vn", "draft-only") or not h.quic or h.alpn == [NO_ALPN]:
        return False
    if alpn not in h.alpn or not ({"v1", "v2"} & set(h.versions)):
        return False
    return not (h.sni and sni != h.sni)


def check_answer(got: dict, want: str, answer: str, where: str) -> None:
    """Asserts a client's result `got` is what the population says: no answer where `want`
    is FAIL, else that rcode, with the population's answer record on NOERROR."""
    if want == FAIL:
        assert not got["ok"], f"{where}: expected no answer, got {got}"
        return
    assert got["ok"], f"{where}: {got.get('error')}"
    assert got["rcode"] == want, f"{where}: rcode {got['rcode']}, population says {want}"
    if want == "NOERROR":
        assert got["answers"] == [answer], f"{where}: answers {got['answers']}, population says {answer}"


def grease(v: int) -> bool:
    return v & 0x0F0F0F0F == 0x0A0A0A0A
