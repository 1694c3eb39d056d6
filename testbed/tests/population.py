"""Reader for the testbed population file (testbed/population.txt, grammar: docs/population.md).

A small, dependency-free mirror of the Go package internal/testbed/population, for the
independent pytest checks and for the analysis code (ground truth of the simulated
internet). It parses format 1 exactly as documented: one record per line, tokens split
like ``shlex.split(line, comments=True)``.

    pop = load()                       # $DOQSCAN_POPULATION or <repo>/testbed/population.txt
    for host in pop.hosts: ...         # [hosts] records, address order
    pop.lookup("198.19.1.5")           # the Host covering an address, or None (silent)
    pop.by_class("doq-retry")
    pop.path_of("198.19.1.5").rtt_ms
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path as FilePath

FORMAT_VERSION = 1
REPO = FilePath(__file__).resolve().parents[2]

# QUIC version names the population file may use: Go's quicver.Known, generated into
# the analysis package's quic_versions.json (the one table Go and Python share).
VERSIONS = {k["name"]: k["value"] for k in json.loads(
    (REPO / "analysis/doqscan_analysis/quic_versions.json").read_text())["known"]}


def _duration_ms(s: str) -> float:
    for unit, scale in (("ms", 1.0), ("us", 0.001), ("s", 1000.0)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * scale
    raise ValueError(f"bad duration {s!r}")


@dataclass(frozen=True)
class PathProfile:
    name: str
    rtt_ms: float
    jitter_ms: float = 0.0
    loss: float = 0.0  # probability per packet and direction (0..1)


@dataclass
class Host:
    prefix: ipaddress.IPv4Network | ipaddress.IPv6Network
    line: int
    cls: str
    quic: list[int] = field(default_factory=list)
    alpn: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    retry: bool = False
    retry_first: bool = False  # retry=first: Retry only to an address not seen for 30 min (dnsproxy)
    token: str = ""
    cert: str = ""
    sni: str = ""
    dns: list[str] = field(default_factory=list)
    dot: int = 0
    doh: int = 0
    doh3: int = 0  # DoH over HTTP/3 (UDP); its port is also a QUIC endpoint
    rcode: str = "NOERROR"
    hostile: str = ""
    peer: str = ""
    path: str = ""
    asn: str = ""
    site: str = ""
    twin: str = ""  # IPv6 records: the IPv4 address of the same (dual-stack) server

    @property
    def first(self) -> str:
        """The first address of the record (what single-address checks use)."""
        return str(self.prefix.network_address)

    def addresses(self):
        return (str(a) for a in self.prefix)

    def quic_ports(self) -> list[int]:
        """Every UDP port with a QUIC endpoint: quic= plus the doh3 port."""
        return self.quic + ([self.doh3] if self.doh3 and self.doh3 not in self.quic else [])

    def version_numbers(self) -> list[int]:
        return [VERSIONS[v] for v in self.versions]


@dataclass
class Population:
    seed: int = 0
    prefix: ipaddress.IPv4Network | None = None
    prefix6: ipaddress.IPv6Network | None = None  # the IPv6 half (prefix6 directive)
    answer: str = ""
    answer_ttl: int = 0
    default_path: str = ""
    paths: dict[str, PathProfile] = field(default_factory=dict)
    certs: dict[str, dict[str, str]] = field(default_factory=dict)
    hosts: list[Host] = field(default_factory=list)  # IPv4 records
    hosts6: list[Host] = field(default_factory=list)  # IPv6 records, kept apart as the Go reader does

    def lookup(self, addr: str) -> Host | None:
        a = ipaddress.ip_address(addr)
        for h in self.hosts if a.version == 4 else self.hosts6:
            if a in h.prefix:
                return h
        return None

    def by_class(self, cls: str) -> list[Host]:
        return [h for h in self.hosts if h.cls == cls]

    def classes(self) -> list[str]:
        return sorted({h.cls for h in self.hosts})

    def path_of(self, addr: str) -> PathProfile:
        h = self.lookup(addr)
        return self.paths[h.path if h and h.path else self.default_path]

    def silent_address(self) -> str:
        """An address of the prefix no record covers (silent by definition)."""
        for a in self.prefix.hosts():
            if self.lookup(str(a)) is None:
                return str(a)
        raise LookupError("every address is assigned")


_INT_KEYS = {"dot", "doh", "doh3"}
_LIST_KEYS = {"alpn", "versions", "dns"}


def parse(text: str) -> Population:
    pop = Population()
    section = None
    for n, raw in enumerate(text.splitlines(), 1):
        toks = shlex.split(raw, comments=True)
        if not toks:
            continue
        head = toks[0]
        if head.startswith("["):
            section = head
            continue
        if section is None:
            _directive(pop, toks, n)
            continue
        kv = {}
        for t in toks[1:]:
            k, sep, v = t.partition("=")
            if not sep:
                raise ValueError(f"line {n}: token {t!r} is not key=value")
            kv[k] = v
        if section == "[paths]":
            pop.paths[head] = PathProfile(
                head,
                _duration_ms(kv["rtt"]),
                _duration_ms(kv.get("jitter", "0ms")),
                float(kv.get("loss", "0%").rstrip("%")) / 100.0,
            )
        elif section == "[certs]":
            pop.certs[head] = kv
        elif section == "[hosts]":
            h = _host(head, kv, n)
            (pop.hosts if h.prefix.version == 4 else pop.hosts6).append(h)
        # [sites], [asns]: not needed by the checks; kept out on purpose.
    if not pop.prefix:
        raise ValueError("population has no prefix directive")
    if pop.hosts6 and not pop.prefix6:
        raise ValueError("IPv6 records without a prefix6 directive")
    pop.hosts.sort(key=lambda h: h.prefix.network_address)
    pop.hosts6.sort(key=lambda h: h.prefix.network_address)
    return pop


def _directive(pop: Population, toks: list[str], n: int) -> None:
    d = toks[0]
    if d == "format":
        if int(toks[1]) != FORMAT_VERSION:
            raise ValueError(f"line {n}: format {toks[1]}, this reader knows {FORMAT_VERSION}")
    elif d == "seed":
        pop.seed = int(toks[1])
    elif d == "prefix":
        pop.prefix = ipaddress.ip_network(toks[1])
    elif d == "prefix6":
        pop.prefix6 = ipaddress.ip_network(toks[1])
        if pop.prefix6.version != 6:
            raise ValueError(f"line {n}: prefix6 {toks[1]} is not an IPv6 prefix")
    elif d == "answer":
        pop.answer = toks[1]
        for t in toks[2:]:
            if t.startswith("ttl="):
                pop.answer_ttl = int(t[4:])
    elif d == "default-path":
        pop.default_path = toks[1]
    else:
        raise ValueError(f"line {n}: unknown directive {d!r}")


def _host(head: str, kv: dict[str, str], n: int) -> Host:
    a = head.split("/")[0]
    single = "/128" if ipaddress.ip_address(a).version == 6 else "/32"
    h = Host(prefix=ipaddress.ip_network(head if "/" in head else head + single), line=n, cls=kv.get("class", ""))
    if not h.cls:
        raise ValueError(f"line {n}: host without class")
    for k, v in kv.items():
        if k == "class":
            continue
        if k == "quic":
            h.quic = [int(p) for p in v.split(",") if p]
        elif k in _LIST_KEYS:
            setattr(h, k, [x for x in v.split(",") if x])
        elif k in _INT_KEYS:
            setattr(h, k, int(v))
        elif k == "retry":
            h.retry = v == "always"
            h.retry_first = v == "first"
        elif hasattr(h, k):
            setattr(h, k, v)
        else:
            raise ValueError(f"line {n}: unknown host key {k!r}")
    return h


def load(path: str | os.PathLike | None = None) -> Population:
    path = path or os.environ.get("DOQSCAN_POPULATION") or REPO / "testbed" / "population.txt"
    with open(path, encoding="utf-8") as f:
        return parse(f.read())
