"""Results by address family; a dual-stack server is one resolver with two addresses."""

import pandas as pd
import psycopg
import pytest

from doqscan_analysis import load

LEAF_A, LEAF_B = b"\x0a" * 32, b"\x0b" * 32

# (address, leaf) of the DoQ-verified results of one week; one failure besides.
ROWS = [
    ("198.19.1.0", LEAF_A),           # dual-stack with 2001:2:0:8001::1 (declared, same leaf)
    ("2001:2:0:8001::1", LEAF_A),
    ("198.19.1.4", LEAF_B),           # declared with 2001:2:0:8001::2, but another leaf
    ("2001:2:0:8001::2", LEAF_A),
    ("198.19.9.9", LEAF_A),           # IPv4 only
    ("2001:2:0:8002::10", LEAF_B),    # IPv6 only, shares LEAF_B with 198.19.1.4: not merged
    ("2001:2:0:8002::11", b"\x0c" * 32),
]


@pytest.fixture(scope="module")
def fam_conn(fresh_db):
    url = fresh_db()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("INSERT INTO vantage_points (vantage_id) VALUES ('v')")
        run = c.execute("INSERT INTO verification_runs (iso_week, vantage_id) VALUES ('2026-W47', 'v') RETURNING run_id").fetchone()[0]
        for port in (853, 784):  # a resolver on two ports is still one address
            for a, leaf in ROWS:
                c.execute("""INSERT INTO verification_results (run_id, address, port, outcome, alpn, quic_version, cert_chain)
                             VALUES (%s, %s, %s, 'doq-verified', 'doq', 1, ARRAY[%s::bytea])""", (run, a, port, leaf))
        c.execute("""INSERT INTO verification_results (run_id, address, port, outcome)
                     VALUES (%s, '2001:2:0:8002::50', 853, 'timeout')""", (run,))
    conn = load.connect(url)
    yield conn
    conn.close()


SIBLINGS = [("198.19.1.0", "2001:2:0:8001::1"), ("198.19.1.4", "2001:2:0:8001::2"),
            ("198.19.7.7", "2001:2:0:8002::11")]  # the last: its IPv4 address was not verified


def test_split_by_family_without_pairs(fam_conn):
    df = load.verified_by_family(fam_conn)
    r = df.iloc[0]
    assert (r.iso_week, r.ipv4, r.ipv6, r.dual_stack, r.resolvers) == ("2026-W47", 3, 4, 0, 7)
    # ::1 and ::2 share LEAF_A with IPv4 addresses, ::10 shares LEAF_B: counted twice maybe
    assert r.shared_cert_unpaired == 3


def test_declared_pair_with_same_leaf_is_one_resolver(fam_conn):
    r = load.verified_by_family(fam_conn, siblings=SIBLINGS).iloc[0]
    # Only the first pair merges: the second presents two leaves, the third's IPv4
    # address was not verified.
    assert (r.ipv4, r.ipv6, r.dual_stack, r.resolvers) == (3, 4, 1, 6)
    assert r.shared_cert_unpaired == 2
    df = load.verified_by_family(fam_conn, siblings=pd.DataFrame(SIBLINGS, columns=["address4", "address6"]))
    assert df.iloc[0].resolvers == 6


def test_bad_pair_refused(fam_conn):
    with pytest.raises(ValueError):
        load.verified_by_family(fam_conn, siblings=[("2001:2:0:8001::1", "198.19.1.0")])


def test_read_siblings(tmp_path, fam_conn):
    p = tmp_path / "siblings.csv"
    p.write_text("# declared dual-stack pairs\naddress4,address6\n198.19.1.0, 2001:2:0:8001::1\n")
    df = load.read_siblings(str(p))
    assert list(df.itertuples(index=False, name=None)) == [("198.19.1.0", "2001:2:0:8001::1")]
    assert load.verified_by_family(fam_conn, siblings=df).iloc[0].dual_stack == 1
    assert load.read_siblings("").empty
    p.write_text("address6,address4\n198.19.1.0,2001:2:0:8001::1\n")
    with pytest.raises(ValueError):
        load.read_siblings(str(p))
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError):
        load.read_siblings(str(p))
