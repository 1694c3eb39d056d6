"""The testbed's third-party DoQ servers in the report: population records with peer=,
their measurements picked out of the facts, medians and ratios against raw rows."""

import numpy as np
import pandas as pd
import pytest

from doqscan_analysis import facts, load, names, stats


def _raw(conn, sql, params=None):
    with conn.cursor() as cur:
        cur.execute(sql, params or {})
        return pd.DataFrame(cur.fetchall(), columns=[d.name for d in cur.description])


# What every population file needs before its hosts (the Go reader checks it all).
POP_HEADER = """format 1
seed 1
prefix 198.18.0.0/15
answer 192.0.2.1 ttl=300
default-path default
[paths]
default  rtt=20ms
[sites]
fra  cc=DE continent=EU city="Frankfurt" lat=50.1109 lon=8.6821
[asns]
AS64496 org="Provider A DNS"
[certs]
self-signed  cn=dns.test issuer=self
[hosts]
"""


@pytest.fixture(scope="module")
def measured_doq(synth_db):
    """Two addresses with measured DoQ answers in the synthetic data."""
    import psycopg
    with psycopg.connect(synth_db, autocommit=True) as c:
        rows = c.execute("""SELECT DISTINCT host(address) FROM measurements
                             WHERE protocol = 'doq' AND phase = 'measured' AND status = 'ok'
                             ORDER BY 1 LIMIT 2""").fetchall()
    assert len(rows) == 2
    return [r[0] for r in rows]


@pytest.fixture()
def population(tmp_path, measured_doq):
    """A population file: a dnsproxy peer and a coredns peer on measured addresses, an
    ordinary DoQ host (no peer=) and a peer the data never measured."""
    a, b = measured_doq
    p = tmp_path / "population.txt"
    p.write_text(POP_HEADER + f"""{a}  class=peer-dnsproxy peer=dnsproxy quic=784 alpn=doq path=default asn=AS64496 site=fra
{b}  class=doq quic=784 alpn=doq versions=v1 cert=self-signed token=honour path=default asn=AS64496 site=fra
198.19.3.250  class=peer-coredns peer=coredns quic=853 alpn=doq path=default asn=AS64496 site=fra
""")
    return p


def test_testbed_peers_reads_peer_records(population, measured_doq):
    peers = load.testbed_peers(population)
    assert list(peers["address"]) == [measured_doq[0], "198.19.3.250"]
    assert list(peers["peer"]) == ["dnsproxy", "coredns"]
    assert list(peers["class"]) == ["peer-dnsproxy", "peer-coredns"]


def test_testbed_peers_environment_and_repository_file(population, monkeypatch):
    monkeypatch.setenv("DOQSCAN_POPULATION", str(population))
    assert set(load.testbed_peers()["peer"]) == {"dnsproxy", "coredns"}
    monkeypatch.delenv("DOQSCAN_POPULATION")
    # the committed population: every peer= record, dnsproxy among them
    peers = load.testbed_peers()
    assert "dnsproxy" in set(peers["peer"])
    assert peers["class"].str.match(r"peer6?-").all()  # peer6-: the IPv6 peers


def test_peer_table_lists_dnsproxy_with_its_ratio(conn, population, measured_doq, spec):
    peers = load.testbed_peers(population)
    prt = load.peer_response_times(conn, peers)
    table = stats.peer_table(prt, peers)
    addr = measured_doq[0]
    # only the measured peer; the ordinary host and the unmeasured peer are not in it
    assert set(table["address"]) == {addr}
    assert set(table["peer"]) == {"dnsproxy"} and set(table["class"]) == {"peer-dnsproxy"}
    assert set(table["vantage_id"]) == set(spec.vantages)
    # medians recomputed from the raw rows: handshakes paired with RTTs by stats.pair_ratio
    h = _raw(conn, """SELECT m.campaign_id, host(m.address) AS address, m.protocol, m.port, c.vantage_id,
                             m.handshake_ns, m.resolve_ns
                        FROM measurements m JOIN campaigns c USING (campaign_id)
                       WHERE m.status = 'ok' AND m.rcode IS NOT NULL AND m.phase = 'measured'
                         AND m.mode = 'fresh' AND m.address = %(a)s::inet""", {"a": addr})
    r = _raw(conn, """SELECT campaign_id, host(address) AS address, transport, port, rtt_ns, status
                        FROM rtt_samples WHERE address = %(a)s::inet""", {"a": addr})
    paired = stats.pair_ratio(h[h.handshake_ns.notna()], r)
    doq = table[table["protocol"] == names.PROTOCOL_LABELS["doq"]]
    assert len(doq) == len(spec.vantages)
    for row in doq.itertuples(index=False):
        p = paired[(paired.vantage_id == row.vantage_id) & (paired.protocol == "doq")]
        assert len(p) > 0
        assert row[table.columns.get_loc("ratio median")] == pytest.approx(np.median(p["ratio"]))
        assert row[table.columns.get_loc("handshake median [ms]")] == pytest.approx(np.median(p["handshake_ns"]) / 1e6)
        assert row[table.columns.get_loc("resolve median [ms]")] == pytest.approx(np.median(p["resolve_ns"]) / 1e6)
        assert row[table.columns.get_loc("queries")] == len(p)


def test_no_peer_in_the_data(conn, tmp_path):
    p = tmp_path / "population.txt"
    p.write_text(POP_HEADER + "198.19.3.250 class=peer-aioquic peer=aioquic quic=784 path=default asn=AS64496 site=fra\n")
    peers = load.testbed_peers(p)
    prt = load.peer_response_times(conn, peers)
    assert prt.empty
    assert stats.peer_table(prt, peers).empty


@pytest.mark.parametrize("addr", ["198.19.3.7", "2001:2:0:8000::7", "ffff:ffff:ffff:ffff:8000::1"])
def test_address_key_matches_sql(conn, addr):
    """address_key encodes an address as the facts query does (facts._ADDR_HI/_ADDR_LO)."""
    sql = ("SELECT (family(m.address) = 6)::int, CASE WHEN family(m.address) = 4 THEN 0::int8 ELSE " + facts._ADDR_HI +
           " END, CASE WHEN family(m.address) = 4 THEN m.address - '0.0.0.0'::inet ELSE " + facts._ADDR_LO +
           " END FROM (SELECT %(a)s::inet AS address) m")
    assert load.address_key(addr) == tuple(conn.execute(sql, {"a": addr}).fetchone())
