"""DoUDP, DoTCP, DoT, DoH and DoH over HTTP/3 at every behaviour class, checked with dnspython from the
vantage namespace: answers, REFUSED/SERVFAIL, and failures where nothing (or something
hostile) serves."""

from __future__ import annotations

import expect
import pytest

from doqscan_analysis import population

POP = population.load()
REPS = expect.representatives(POP)
PORTS = {"udp": lambda h: 53, "tcp": lambda h: 53, "dot": lambda h: h.dot or 853, "doh": lambda h: h.doh or 443,
         "doh3": lambda h: h.doh3 or 443}
CASES = [(cls, proto) for cls in sorted(REPS) for proto in PORTS]


@pytest.fixture(scope="module")
def results(vantage):
    checks = [{"kind": "dns", "proto": p, "addr": REPS[c].first, "port": PORTS[p](REPS[c])} for c, p in CASES]
    checks.append({"kind": "dns", "proto": "udp", "addr": POP.silent_address(), "port": 53})
    res = vantage.run(checks)
    return dict(zip(CASES + [("silent", "udp")], res))


@pytest.mark.parametrize("cls,proto", CASES, ids=[f"{c}-{p}" for c, p in CASES])
def test_dns(results, cls, proto):
    h = REPS[cls]
    want = expect.dns(h, proto)
    got = results[(cls, proto)]
    expect.check_answer(got, want, POP.answer, f"{h.first} ({cls}, line {h.line}) over {proto}")


def test_silent_address(results):
    got = results[("silent", "udp")]
    assert not got["ok"], f"unassigned {POP.silent_address()} answered DNS: {got}"
