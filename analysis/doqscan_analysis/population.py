"""The testbed population (testbed/population.txt, grammar: docs/population.md): the
ground truth of the simulated internet, read by the analysis (load.testbed_peers) and by
the testbed's independent pytest checks (testbed/tests).

The file is parsed once, by the Go reader (internal/testbed/population): load() runs
`bin/simserver check --json` and turns its JSON into the dataclasses below, so Python
never parses the grammar itself and cannot drift from what the testbed serves.

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
import subprocess
from dataclasses import dataclass, field
from pathlib import Path as FilePath

from .db import REPO  # the committed population file and bin/simserver, which parses it

SIMSERVER = REPO / "bin" / "simserver"

# QUIC version names the population file may use: Go's quicver.Known, generated into
# this package's quic_versions.json (the one table Go and Python share).
VERSIONS = {k["name"]: k["value"] for k in json.loads(
    (FilePath(__file__).with_name("quic_versions.json")).read_text())["known"]}


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
    asn: int = 0
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
    certs: dict[str, dict] = field(default_factory=dict)  # name -> cn, sans, issuer, intermediates, pad
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


def _host(r: dict) -> Host:
    return Host(prefix=ipaddress.ip_network(r["prefix"]), line=r["line"], cls=r["class"],
                quic=r["quic"] or [], alpn=r["alpn"] or [], versions=r["versions"] or [], retry=r["retry"],
                retry_first=r["retry_first"], token=r["token"], cert=r["cert"], sni=r["sni"], dns=r["dns"] or [],
                dot=r["dot"], doh=r["doh"], doh3=r["doh3"], rcode=r["rcode"], hostile=r["hostile"], peer=r["peer"],
                path=r["path"], asn=r["asn"], site=r["site"], twin=r["twin"])


def from_json(doc: dict) -> Population:
    """The Population of `simserver check --json`'s document."""
    return Population(
        seed=doc["seed"],
        prefix=ipaddress.ip_network(doc["prefix"]),
        prefix6=ipaddress.ip_network(doc["prefix6"]) if doc["prefix6"] else None,
        answer=doc["answer"],
        answer_ttl=doc["answer_ttl"],
        default_path=doc["default_path"],
        paths={n: PathProfile(n, p["rtt_ns"] / 1e6, p["jitter_ns"] / 1e6, p["loss"])
               for n, p in (doc["paths"] or {}).items()},
        certs=doc["certs"] or {},
        hosts=[_host(r) for r in doc["records"] or []],
        hosts6=[_host(r) for r in doc["records6"] or []],
    )


def load(path: str | os.PathLike | None = None) -> Population:
    """The population file at `path`, else $DOQSCAN_POPULATION, else the committed one, as
    the Go reader parses it. A file the Go reader rejects raises ValueError with its
    message; FileNotFoundError when bin/simserver is not built (./dev build)."""
    path = path or os.environ.get("DOQSCAN_POPULATION") or REPO / "testbed" / "population.txt"
    if not SIMSERVER.exists():
        raise FileNotFoundError(f"{SIMSERVER} is not built (./dev build): it parses the population file")
    out = subprocess.run([str(SIMSERVER), "check", "--json", "--population", str(path)],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise ValueError(f"population {path}: {out.stderr.strip()}")
    return from_json(json.loads(out.stdout))
