"""identity: QUIC libraries per week, DDR designations, connection policies and the
forwarder's cost, amplification cells, on a small database whose rows the tests write
themselves (conftest.idb: every figure is then known)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from doqscan_analysis import identity, load

WEEK = "2026-W48"  # the week of conftest.idb


@pytest.fixture()
def c(idb):
    with load.connect(idb) as conn:
        yield conn


def test_libraries_by_week(c):
    df = identity.libraries_by_week(c, [WEEK])
    got = dict(zip(df["library"], df["resolvers"]))
    # .1 under its 853 (quic-go), .5 is no resolver, .6 verified on an unusual port.
    assert got == {"quic-go": 2, "quinn": 1, "unknown": 1, identity.NOT_IDENTIFIED: 1}
    fig = identity.libraries_figure(df)
    assert fig.axes[0].get_title().startswith("DoQ-verified resolvers per week by QUIC library")


def test_ddr(c):
    q = identity.ddr_queries(c, [WEEK])
    assert dict(zip(q["status"], q["responders"])) == {"designations": 2, "none": 1}
    e = identity.ddr_endpoints(c, [WEEK]).set_index(["address", "port"])
    assert len(e) == 3  # the DoT designation is no DoQ endpoint
    assert e.loc[("198.19.0.6", 10853), "outcome"] == "doq-verified"
    assert e.loc[("198.19.0.6", 10853), "port_class"] == "other port"
    assert not e.loc[("198.19.0.6", 10853), "scanned"]
    assert e.loc[("198.19.0.7", 8530), "outcome"] == "timeout"
    assert e.loc[("198.19.0.1", 853), "scanned"] and e.loc[("198.19.0.1", 853), "port_class"] == "scanned port"
    t = identity.ddr_table(identity.ddr_endpoints(c, [WEEK]))
    assert t["endpoints"].sum() == 3


def test_policies_and_forwarder(c):
    pol = identity.policies(c, [WEEK])
    tab = identity.policy_table(pol).set_index("protocol")
    assert tab.loc["doq", "endpoints"] == 2 and tab.loc["doq", "closed by server"] == 1
    assert tab.loc["doq", "queries before close (median)"] == 40
    assert tab.loc["doq", "Retry never/first/always"] == "1/1/0"
    assert tab.loc["doq", "drops idle before advertised"] == 0
    # token ages: .2 honoured after the longest wait and never refused (a lower bound),
    # .1 honoured after 8 s, refused after 12 s; DoT: nothing known, not "none".
    got = pol.set_index(["address", "protocol"])
    assert got.loc[("198.19.0.2", "doq"), "token_honoured_for_ms"] == 40000
    assert got.loc[("198.19.0.1", "doq"), "token_refused_after_ms"] == 12000
    assert tab.loc["doq", "token honoured / not"] == "2 / 0"
    assert tab.loc["doq", "token honoured for (endpoints)"] == "8 to 12 s: 1; at least 40 s: 1"
    assert pd.isna(tab.loc["dot", "token honoured for (endpoints)"])
    cw = identity.cold_and_warm(c, [WEEK])
    f = identity.forwarder_cost(pol, cw).set_index("protocol")
    # DoQ: .1 every 40th query cold within 10 s, all cold at 10 s and 60 s; .2 never cold
    # (survives 40 s; 60 s undecided: kept).
    every1 = sorted([15 + (45 - 15) / 40, 30])
    assert math.isclose(f.loc["doq", "every 1s: ms/query (median)"], sum(every1) / 2)
    assert f.loc["doq", "every 60s: all cold"] == "50%"
    assert f.loc["dot", "every 10s: all cold"] == "100%" and f.loc["dot", "every 1s: all cold"] == "0%"
    assert math.isclose(f.loc["dot", "every 10s: ms/query (median)"], 55)


@pytest.mark.parametrize("honoured, refused, want", [
    (40000, None, "at least 40 s"),  # the longest wait honoured, none refused: a lower bound
    (8000, 12000, "8 to 12 s"),
    (None, 12000, "under 12 s"),
    (None, 0, "refused after 0 s"),
    (12000, 4000, "at least 12 s (refused after 4 s: not by age)"),
    (None, None, None),  # unknown stays unknown
    (float("nan"), float("nan"), None),  # as pandas gives a NULL in a numeric column
])
def test_token_lifetime(honoured, refused, want):
    assert identity.token_lifetime(honoured, refused) == want


def test_amplification_cells(c):
    cells = identity.amplification_cells(identity.amplification(c, [WEEK]))
    k = cells.set_index(["chain", "key_share", "initial_size"])
    assert k.loc[("> 9 KB", "x25519", 1452), "stall_share"] == 1
    assert k.loc[("2.5-4 KB", "x25519", 1200), "stall_share"] == 1
    assert k.loc[("2.5-4 KB", "x25519", 1452), "stall_share"] == 0
    assert k.loc[("< 2.5 KB", "x25519mlkem768", 1200), "extra_rtts"] == 0  # the Retry's round trip is not the limit's
    assert k.loc[("> 9 KB", "x25519", 1200), "extra_rtts"] == 1
    fig = identity.amplification_figure(cells)
    assert len(fig.axes) == 4
