"""identity: QUIC libraries per week, DDR designations, connection policies and the
forwarder's cost, amplification cells, on a small database whose rows the test writes
itself (every figure is then known)."""

from __future__ import annotations

import math

import psycopg
import pytest

from doqscan_analysis import identity, load

WEEK = "2026-W48"


@pytest.fixture(scope="module")
def idb(fresh_db):
    url = fresh_db()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("INSERT INTO vantage_points (vantage_id) VALUES ('vp')")
        c.execute("INSERT INTO scans (scan_id, iso_week, vantage_id, label, ports) VALUES (1, %s, 'vp', 'weekly', '{53,853}')", (WEEK,))
        c.execute("INSERT INTO verification_runs (run_id, iso_week, vantage_id, scan_id) VALUES (1, %s, 'vp', 1)", (WEEK,))
        # Resolvers: .1 quic-go on 853 and quinn on 784 (853 decides), .2 quinn, .3 unknown,
        # .4 without identification, .5 a QUIC host that is not DoQ (not a resolver).
        res = [("198.19.0.1", 853, "doq-verified", "quic-go"), ("198.19.0.1", 784, "doq-verified", "quinn"),
               ("198.19.0.2", 853, "doq-verified", "quinn"), ("198.19.0.3", 853, "doq-verified", "unknown"),
               ("198.19.0.4", 853, "doq-verified", None), ("198.19.0.5", 853, "quic-not-doq", "ngtcp2"),
               ("198.19.0.6", 10853, "doq-verified", "quic-go"), ("198.19.0.7", 8530, "timeout", None)]
        for addr, port, outcome, lib in res:
            c.execute("INSERT INTO verification_results (run_id, address, port, outcome, attempts, verified_at) "
                      "VALUES (1, %s, %s, %s, 1, now())", (addr, port, outcome))
            if lib:
                c.execute("INSERT INTO quic_stacks (run_id, address, port, library, evidence) VALUES (1, %s, %s, %s, '{}')",
                          (addr, port, lib))
        # DDR: .50 designates DoQ on .6:10853 and .7:8530; .51 designates .1:853 (scanned)
        # and a DoT endpoint; .52 answers without designations.
        c.execute("INSERT INTO scan_replies (scan_id, port, address, reply_kind, received_at) "
                  "VALUES (1, 853, '198.19.0.1', 'quic-vn', now())")
        for addr, status in [("198.19.0.50", "designations"), ("198.19.0.51", "designations"), ("198.19.0.52", "none")]:
            c.execute("INSERT INTO ddr_queries (run_id, address, status, queried_at) VALUES (1, %s, %s, now())", (addr, status))
        for resolver, seq, alpns, port, hints in [("198.19.0.50", 0, ["doq"], 10853, ["198.19.0.6"]),
                                                  ("198.19.0.50", 1, ["doq"], 8530, ["198.19.0.7"]),
                                                  ("198.19.0.51", 0, ["doq"], None, ["198.19.0.1"]),
                                                  ("198.19.0.51", 1, ["dot"], 853, ["198.19.0.1"])]:
            c.execute("INSERT INTO ddr_designations (run_id, resolver, seq, priority, target, alpns, port, ipv4hints) "
                      "VALUES (1, %s, %s, 1, 'dns.example.', %s, %s, %s::inet[])", (resolver, seq, alpns, port, hints))
        # Policies: .1 DoQ closes after 40 queries, drops idle at 10 s; .2 DoQ keeps 300
        # queries and survives 40 s idle; .1 DoT drops idle at 5 s.
        c.execute("INSERT INTO policy_runs (run_id, iso_week, vantage_id) VALUES (1, %s, 'vp')", (WEEK,))
        pol = [("198.19.0.1", 853, "doq", 44, 40, True, 10000, 8000, 10000, 100, True, None, "never", True, True, 604800),
               ("198.19.0.2", 853, "doq", 300, 300, False, 30000, 40000, None, 100, False, None, "first", False, True, 86400),
               ("198.19.0.1", 853, "dot", 300, 300, False, None, 4000, 5000, None, None, None, None, None, True, 604800)]
        for p in pol:
            c.execute("""INSERT INTO connection_policies (run_id, address, port, protocol, status, queries_sent,
                         queries_answered, closed_by_server, idle_advertised_ms, idle_alive_ms, idle_dead_ms, max_streams,
                         token_issued, token_honoured, retry_policy, zero_rtt, resumed, ticket_lifetime_s, checked_at)
                         VALUES (1, %s, %s, %s, 'ok', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now())""", p)
        # Amplification: a 13.7 KB chain stalls at every size with X25519; a 3.9 KB one only
        # at 1,200 bytes; a small one never.
        amp = [("198.19.0.1", 1200, "x25519", 13732, True, 2), ("198.19.0.1", 1452, "x25519", 13732, True, 2),
               ("198.19.0.2", 1200, "x25519", 3900, True, 2), ("198.19.0.2", 1452, "x25519", 3900, False, 1),
               ("198.19.0.3", 1200, "x25519", 900, False, 1), ("198.19.0.3", 1452, "x25519", 900, False, 1),
               ("198.19.0.3", 1200, "x25519mlkem768", 900, False, 2)]  # a Retry: not an extra round trip of the limit
        for addr, size, ks, chain, stalled, rtts in amp:
            c.execute("""INSERT INTO amplification_probes (run_id, address, port, initial_size, key_share, status, stalled,
                         round_trips, chain_bytes, retry_seen, checked_at)
                         VALUES (1, %s, 853, %s, %s, 'ok', %s, %s, %s, %s, now())""",
                      (addr, size, ks, stalled, rtts, chain, rtts == 2 and not stalled))
        # Hourly measurements: cold (handshake + resolve) and warm (resolve) queries.
        c.execute("INSERT INTO campaigns (campaign_id, vantage_id, round_hour) VALUES (1, 'vp', '2026-11-24 10:00+00')")
        for i, (addr, proto, hs, rs) in enumerate([("198.19.0.1", "doq", 30e6, 15e6), ("198.19.0.2", "doq", 60e6, 30e6),
                                                   ("198.19.0.1", "dot", 40e6, 15e6)]):
            c.execute("""INSERT INTO measurements (measurement_id, campaign_id, address, protocol, port, phase, started_at,
                         handshake_ns, resolve_ns, status, rcode)
                         VALUES (md5(%s)::uuid, 1, %s, %s, 853, 'measured', now(), %s, %s, 'ok', 0)""",
                      (str(i), addr, proto, int(hs), int(rs)))
    return url


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
    cw = identity.cold_and_warm(c, [WEEK])
    f = identity.forwarder_cost(pol, cw).set_index("protocol")
    # DoQ: .1 every 40th query cold within 10 s, all cold at 10 s and 60 s; .2 never cold
    # (survives 40 s; 60 s undecided: kept).
    every1 = sorted([15 + (45 - 15) / 40, 30])
    assert math.isclose(f.loc["doq", "every 1s: ms/query (median)"], sum(every1) / 2)
    assert f.loc["doq", "every 60s: all cold"] == "50%"
    assert f.loc["dot", "every 10s: all cold"] == "100%" and f.loc["dot", "every 1s: all cold"] == "0%"
    assert math.isclose(f.loc["dot", "every 10s: ms/query (median)"], 55)


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
