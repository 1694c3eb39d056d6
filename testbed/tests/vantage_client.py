"""Independent clients the pytest checks run INSIDE the vantage namespace.

Reads a JSON list of checks on stdin, runs them concurrently, writes a JSON list of
results (same order) on stdout. Nothing here is doqscan code: DNS over UDP/TCP/TLS/HTTPS/
QUIC is dnspython, QUIC handshakes are aioquic, RTTs come from ping(8) and a plain TCP
connect. Every check has a timeout; an exception becomes {"ok": false, "error": ...}.

Check kinds (all take "addr"):
  {"kind": "dns", "proto": "udp|tcp|dot|doh|doh3|doq", "port": N, "sni": NAME|null}
  {"kind": "quic", "port": N, "alpn": [..], "sni": NAME|null}   handshake only (aioquic)
  {"kind": "vn", "port": N}                                    raw reserved-version Initial
  {"kind": "ping", "count": N}
  {"kind": "tcpconnect", "port": N, "count": N}
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import socket
import ssl
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

QNAME = "test.com."
TIMEOUT = 4.0  # seconds per DNS exchange / handshake (paths go up to 300 ms RTT, chains are big)
TESTBED = ipaddress.ip_network("198.18.0.0/15")

# VN probe (RFC 9000 §17.2, §14.1; FIELD-NOTES: >= 1200 bytes, DCID 8..20 bytes).
RESERVED_VERSION = 0x1A2A3A4A
DCID = b"pytest-vnprobe!!"
SCID = b"pyvantag"


def _guard(addr: str) -> None:
    if ipaddress.ip_address(addr) not in TESTBED:
        raise ValueError(f"{addr} is outside 198.18.0.0/15: refusing to send")


def dns_check(c: dict) -> dict:
    q = dns.message.make_query(QNAME, dns.rdatatype.A)
    proto, addr, port = c["proto"], c["addr"], c["port"]
    t0 = time.monotonic()
    if proto == "udp":
        r = dns.query.udp(q, addr, port=port, timeout=TIMEOUT)
    elif proto == "tcp":
        r = dns.query.tcp(q, addr, port=port, timeout=TIMEOUT)
    elif proto == "dot":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        r = dns.query.tls(q, addr, port=port, timeout=TIMEOUT, ssl_context=ctx, server_hostname=c.get("sni"))
    elif proto == "doh":
        r = dns.query.https(q, addr, port=port, timeout=TIMEOUT, verify=False)
    elif proto == "doh3":
        r = dns.query.https(q, addr, port=port, timeout=TIMEOUT, verify=False,
                            http_version=dns.query.HTTPVersion.H3)
    elif proto == "doq":
        r = dns.query.quic(q, addr, port=port, timeout=TIMEOUT, verify=False, server_hostname=c.get("sni"))
    else:
        raise ValueError(f"unknown proto {proto}")
    answers = [rd.address for rrset in r.answer for rd in rrset if rrset.rdtype == dns.rdatatype.A]
    return {"ok": True, "rcode": dns.rcode.to_text(r.rcode()), "answers": answers,
            "ms": (time.monotonic() - t0) * 1000}


async def _quic(c: dict) -> dict:
    from aioquic.asyncio.client import connect
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.logger import QuicLogger

    logger = QuicLogger()
    tokens: list[bytes] = []
    cfg = QuicConfiguration(is_client=True, alpn_protocols=c["alpn"], verify_mode=ssl.CERT_NONE,
                            server_name=c.get("sni"), quic_logger=logger)
    out: dict = {"ok": False}
    try:
        async with asyncio.timeout(TIMEOUT):
            async with connect(c["addr"], c["port"], configuration=cfg, token_handler=tokens.append) as client:
                out.update(ok=True, alpn=client._quic.tls.alpn_negotiated, version=client._quic._version)
                # One round trip after the handshake: quic-go and ngtcp2 send NEW_TOKEN in
                # the flight that confirms the handshake, so it has arrived by then.
                await client.ping()
                await client.ping()
    except BaseException as e:  # noqa: BLE001 - every failure is a result
        out["error"] = f"{type(e).__name__}: {e}"
    events = [e for t in logger.to_dict()["traces"] for e in t["events"]]
    out["retry"] = any(e["name"].endswith("packet_received") and e["data"]["header"]["packet_type"] == "retry"
                       for e in events)
    out["vn"] = any(e["name"].endswith("packet_received")
                    and e["data"]["header"]["packet_type"] == "version_negotiation" for e in events)
    out["token"] = bool(tokens)
    return out


def quic_check(c: dict) -> dict:
    return asyncio.run(_quic(c))


def vn_probe() -> bytes:
    b = bytes([0xC3]) + struct.pack("!I", RESERVED_VERSION) + bytes([len(DCID)]) + DCID + bytes([len(SCID)]) + SCID
    b += b"\x00"  # empty token
    rest = 1200 - len(b) - 2
    b += struct.pack("!H", 0x4000 | rest) + b"\x00" * 4
    return b + b"\x00" * (1200 - len(b))


def parse_vn(p: bytes) -> dict:
    """RFC 9000 §17.2.1; anything else is reported as not a (valid) VN packet."""
    if len(p) < 7 or not p[0] & 0x80:
        return {"valid": False, "why": "not a long header"}
    if struct.unpack("!I", p[1:5])[0] != 0:
        return {"valid": False, "why": "version is not 0"}
    i = 5
    dl = p[i]
    dcid = p[i + 1:i + 1 + dl]
    i += 1 + dl
    if i >= len(p):
        return {"valid": False, "why": "truncated"}
    sl = p[i]
    scid = p[i + 1:i + 1 + sl]
    i += 1 + sl
    rest = p[i:]
    if i > len(p) or not rest or len(rest) % 4:
        return {"valid": False, "why": f"version list of {len(rest)} bytes"}
    versions = [struct.unpack("!I", rest[j:j + 4])[0] for j in range(0, len(rest), 4)]
    return {"valid": dcid == SCID and scid == DCID, "versions": versions,
            "why": "" if dcid == SCID and scid == DCID else "connection IDs not echoed"}


def vn_check(c: dict) -> dict:
    _guard(c["addr"])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(TIMEOUT)
    try:
        s.connect((c["addr"], c["port"]))
        s.send(vn_probe())
        p = s.recv(65535)
    except (TimeoutError, OSError) as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    finally:
        s.close()
    return {"ok": True, "hex": p.hex(), **parse_vn(p)}


def ping_check(c: dict) -> dict:
    _guard(c["addr"])
    out = subprocess.run(["ping", "-n", "-c", str(c["count"]), "-i", "0.2", "-W", "2", c["addr"]],
                         capture_output=True, text=True, timeout=120)
    ms = [float(x) for x in re.findall(r"time=([\d.]+) ms", out.stdout)]
    if not ms:
        return {"ok": False, "error": (out.stdout + out.stderr)[-500:]}
    return {"ok": True, "ms": ms, "sent": c["count"]}


def tcpconnect_check(c: dict) -> dict:
    """Wall time of connect() (SYN to SYN-ACK), and the kernel's own RTT sample of the
    handshake (tcp_info.tcpi_rtt, microseconds, offset 68 in struct tcp_info)."""
    _guard(c["addr"])
    ms, kernel_ms = [], []
    for _ in range(c["count"]):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(TIMEOUT)
        t0 = time.perf_counter_ns()
        s.connect((c["addr"], c["port"]))
        ms.append((time.perf_counter_ns() - t0) / 1e6)
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        kernel_ms.append(struct.unpack_from("I", info, 68)[0] / 1000)
        s.close()
    return {"ok": True, "ms": ms, "kernel_ms": kernel_ms}


KINDS = {"dns": dns_check, "quic": quic_check, "vn": vn_check, "ping": ping_check, "tcpconnect": tcpconnect_check}


def run_one(c: dict) -> dict:
    try:
        _guard(c["addr"])
        return KINDS[c["kind"]](c)
    except BaseException as e:  # noqa: BLE001 - every failure is a result
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main() -> None:
    checks = json.load(sys.stdin)
    # Timing checks run one at a time after the rest, so no thread of ours competes
    # with them for the interpreter.
    timed = [i for i, c in enumerate(checks) if c["kind"] in ("ping", "tcpconnect")]
    results: list = [None] * len(checks)
    with ThreadPoolExecutor(max_workers=24) as pool:
        rest = [i for i in range(len(checks)) if i not in set(timed)]
        for i, r in zip(rest, pool.map(run_one, [checks[i] for i in rest])):
            results[i] = r
    for i in timed:
        results[i] = run_one(checks[i])
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
