"""pytest fixtures: a fresh PostgreSQL database per test session, filled by the seeded
synthetic generator (doqscan_analysis.synth) from a known spec.

The server: doqscan_analysis.db.server_url ($DOQSCAN_TEST_DATABASE_URL, else
$DATABASE_URL, else the project's private cluster). The fixture creates
doqscan_pytest_<random>, applies the repository's schema.sql and migrations
(db.apply_schema), and drops it afterwards.
"""

from __future__ import annotations

import secrets

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from doqscan_analysis import synth
from doqscan_analysis.db import apply_schema, server_url


@pytest.fixture(scope="session")
def fresh_db():
    """A factory: fresh_db() -> URL of a new empty database with schema.sql applied;
    every database it made is dropped at the end of the session."""
    base = server_url()
    made = []

    def make() -> str:
        name = f"doqscan_pytest_{secrets.token_hex(4)}"
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        url = make_conninfo(base, dbname=name)
        with psycopg.connect(url, autocommit=True) as c:
            apply_schema(c)
        return url

    yield make
    with psycopg.connect(base, autocommit=True) as c:
        for name in made:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def spec():
    return synth.default_spec(vantages=["synth-a", "synth-b"], hours=6,
                              key_shares=["x25519", "x25519mlkem768"])


@pytest.fixture(scope="session")
def synth_db(fresh_db, spec):
    """URL of a database filled from `spec`."""
    url = fresh_db()
    with psycopg.connect(url, autocommit=True) as c:
        synth.generate(c, spec)
    return url


@pytest.fixture()
def conn(synth_db):
    with psycopg.connect(synth_db, autocommit=True) as c:
        yield c


@pytest.fixture(scope="session")
def idb(fresh_db):
    """URL of a small database with rows in every table identity reads (QUIC libraries,
    DDR, connection policies, amplification probes, hourly measurements), all in ISO week
    2026-W48 of vantage point vp; test_identity knows every figure it gives."""
    WEEK = "2026-W48"
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
        c.execute("INSERT INTO scan_replies (scan_id, port, address, reply_kind, received_at, iso_week) "
                  "VALUES (1, 853, '198.19.0.1', 'quic-vn', now(), %s)", (WEEK,))
        for addr, status in [("198.19.0.50", "designations"), ("198.19.0.51", "designations"), ("198.19.0.52", "none")]:
            c.execute("INSERT INTO ddr_queries (run_id, address, status, queried_at) VALUES (1, %s, %s, now())", (addr, status))
        for resolver, seq, alpns, port, hints in [("198.19.0.50", 0, ["doq"], 10853, ["198.19.0.6"]),
                                                  ("198.19.0.50", 1, ["doq"], 8530, ["198.19.0.7"]),
                                                  ("198.19.0.51", 0, ["doq"], None, ["198.19.0.1"]),
                                                  ("198.19.0.51", 1, ["dot"], 853, ["198.19.0.1"])]:
            c.execute("INSERT INTO ddr_designations (run_id, resolver, seq, priority, target, alpns, port, ipv4hints) "
                      "VALUES (1, %s, %s, 1, 'dns.example.', %s, %s, %s::inet[])", (resolver, seq, alpns, port, hints))
        # Policies: .1 DoQ closes after 40 queries, drops idle at 10 s, honours its tokens
        # after 8 s and not after 12 s; .2 DoQ keeps 300 queries, survives 40 s idle and
        # honours its tokens after the longest wait (40 s: a lower bound); .1 DoT drops
        # idle at 5 s (nothing of tokens applies: NULL).
        c.execute("INSERT INTO policy_runs (run_id, iso_week, vantage_id) VALUES (1, %s, 'vp')", (WEEK,))
        pol = [("198.19.0.1", 853, "doq", 44, 40, True, 10000, 8000, 10000, 100, True, True, 8000, 12000, "never", True, True,
                604800),
               ("198.19.0.2", 853, "doq", 300, 300, False, 30000, 40000, None, 100, True, True, 40000, None, "first", False,
                True, 86400),
               ("198.19.0.1", 853, "dot", 300, 300, False, None, 4000, 5000, None, None, None, None, None, None, None, True,
                604800)]
        for p in pol:
            c.execute("""INSERT INTO connection_policies (run_id, address, port, protocol, status, queries_sent,
                         queries_answered, closed_by_server, idle_advertised_ms, idle_alive_ms, idle_dead_ms, max_streams,
                         token_issued, token_honoured, token_honoured_for_ms, token_refused_after_ms, retry_policy,
                         zero_rtt, resumed, ticket_lifetime_s, checked_at)
                         VALUES (1, %s, %s, %s, 'ok', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now())""",
                      p)
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
                         handshake_ns, resolve_ns, status, rcode, round_hour)
                         VALUES (md5(%s)::uuid, 1, %s, %s, 853, 'measured', now(), %s, %s, 'ok', 0,
                                 '2026-11-24 10:00+00')""",
                      (str(i), addr, proto, int(hs), int(rs)))
    return url
