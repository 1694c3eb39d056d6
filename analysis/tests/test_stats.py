"""Unit tests of the pure functions (no database)."""

import numpy as np
import pandas as pd
import pytest

from doqscan_analysis import names, stats


def test_ecdf_exact():
    x, y = stats.ecdf([3, 1, 2, None, 2])
    assert list(x) == [1, 2, 2, 3]
    assert list(y) == [0.25, 0.5, 0.75, 1.0]
    x, y = stats.ecdf([])
    assert len(x) == 0 and len(y) == 0


def test_share_at_most():
    q = np.array([1, 2, 3, 4])
    assert stats.share_at_most(q, 2.5) == 0.5
    assert np.isnan(stats.share_at_most([], 1))


@pytest.mark.parametrize("v,name", [
    (1, "QUIC v1"), (0x6B3343CF, "QUIC v2"), (0xFF00001D, "QUIC draft-29"), (0xFF000022, "QUIC draft-34"),
    (0x1A2A3A4A, "grease"), (0xBABABABA, "grease"), (0x51303530, "gQUIC Q050"), (0x12345678, "0x12345678"),
    (None, "unknown"),
])
def test_quic_names(v, name):
    assert names.quic_version_name(v) == name


@pytest.mark.parametrize("alpn,name", [
    ("doq", "DoQ RFC 9250"), ("doq-i02", "DoQ draft-02"), ("doq-i11", "DoQ draft-11"), ("dq", "DoQ dq (AdGuard)"),
    ("h3", "ALPN h3"), (None, "unknown"),
])
def test_doq_names(alpn, name):
    assert names.doq_version_name(alpn) == name


def test_pair_ratio_uses_median_of_same_key():
    h = pd.DataFrame({"campaign_id": [1, 1], "address": ["a", "a"], "protocol": ["doq", "dot"],
                      "port": [853, 853], "handshake_ns": [200, 300]})
    r = pd.DataFrame({"campaign_id": [1, 1, 1, 1, 1], "address": ["a"] * 5,
                      "transport": ["quic", "quic", "quic", "tcp", "udp"], "port": [853] * 5,
                      "rtt_ns": [100, 90, 1000, 150, 1], "status": ["ok", "ok", "ok", "ok", "ok"]})
    out = stats.pair_ratio(h, r).set_index("protocol")
    assert out.loc["doq", "ratio"] == 2.0          # median(100, 90, 1000) = 100
    assert out.loc["dot", "ratio"] == 2.0          # tcp sample only


def test_dox_set():
    a = pd.DataFrame({"address": ["x"] * 5 + ["y"] * 4, "protocol": names.DOX_PROTOCOLS + names.DOX_PROTOCOLS[:4]})
    assert stats.dox_set(a) == {"x"}


def test_churn_shares():
    m = pd.DataFrame({"iso_week": ["W1", "W2", "W3"], "week_index": [1, 2, 3], "total": [10, 8, 12],
                      "kept_from_previous": [0, 6, 8], "kept_from_first": [10, 6, 5]})
    c = stats.churn(m)
    assert list(c["new"][1:]) == [2, 4]
    assert list(c["gone"][1:]) == [4, 0]
    assert stats.retention_first_to_last(m) == 0.5


def test_save_table_concurrent_writers(tmp_path):
    """Two notebooks of one report may write the same table at once (provenance.csv):
    every write succeeds and the file is one writer's whole table, never a mix or a
    leftover temporary file."""
    import threading

    import pandas as pd

    from doqscan_analysis import plots

    frames = [pd.DataFrame({"writer": [w] * 2000, "n": range(2000)}) for w in (0, 1)]
    errors = []

    def write(df):
        try:
            for _ in range(30):
                plots.save_table(df, str(tmp_path), "provenance")
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(f,)) for f in frames]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = pd.read_csv(tmp_path / "figures" / "provenance.csv")
    assert len(got) == 2000 and got["writer"].nunique() == 1
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["provenance.csv"]
