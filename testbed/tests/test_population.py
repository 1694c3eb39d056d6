"""The population as the Python checks see it: the Go reader's parse
(`simserver check --json`), with the invariants the checks rely on."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import REPO

from doqscan_analysis import population


def test_parse_committed_file():
    pop = population.load()
    assert pop.prefix is not None and pop.answer
    assert pop.hosts, "no [hosts] records"
    for h in pop.hosts:
        assert h.prefix.subnet_of(pop.prefix), f"line {h.line}: {h.prefix} outside {pop.prefix}"
        assert h.path == "" or h.path in pop.paths, f"line {h.line}: unknown path {h.path}"
        assert h.cert == "" or h.cert in pop.certs, f"line {h.line}: unknown cert {h.cert}"
    prefixes = sorted(h.prefix for h in pop.hosts)
    for a, b in zip(prefixes, prefixes[1:]):
        assert not a.overlaps(b), f"{a} overlaps {b}"
    # The IPv6 half: inside prefix6, dual-stack twins name a listed IPv4 host with the
    # same certificate.
    assert pop.hosts6 and pop.prefix6 is not None
    for h in pop.hosts6:
        assert h.prefix.subnet_of(pop.prefix6), f"line {h.line}: {h.prefix} outside {pop.prefix6}"
        if h.twin:
            t = pop.lookup(h.twin)
            assert t is not None and t.cert == h.cert, f"line {h.line}: twin {h.twin} missing or with another certificate"


def test_bad_input_is_an_error(tmp_path):
    """A file the Go reader rejects is a ValueError carrying its message."""
    bad = tmp_path / "population.txt"
    bad.write_text("format 1\nprefix 198.19.0.0/16\n[hosts]\n198.19.1.1 class=a bogus=1\n")
    with pytest.raises(ValueError, match="bogus"):
        population.load(bad)


def test_agrees_with_go_reader():
    """Same classes and address counts as `simserver check` prints."""
    out = subprocess.run([str(population.SIMSERVER), "check", "--population", str(REPO / "testbed" / "population.txt")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pop = population.load()
    counts = {}
    for h in pop.hosts:
        counts[h.cls] = counts.get(h.cls, 0) + h.prefix.num_addresses
    text = out.stdout + out.stderr
    for cls, n in counts.items():
        assert re.search(rf"\b{re.escape(cls)}\b\D+{n}\b", text), f"class {cls}: {n} addresses not in:\n{text[:2000]}"
