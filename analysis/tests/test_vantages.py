"""Vantage points compared on the same resolvers (response_times.ipynb):
load.per_resolver_medians against raw rows, stats.vantage_comparison on frames whose
answer follows from their construction, and the figure and CSV it writes."""

import os

import numpy as np
import pandas as pd
import pytest

from doqscan_analysis import load, plots, stats


def _raw(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return pd.DataFrame(cur.fetchall(), columns=[d.name for d in cur.description])


def test_per_resolver_medians_match_raw_rows(conn, spec):
    per = load.per_resolver_medians(conn)
    h = _raw(conn, """SELECT m.campaign_id, host(m.address) AS address, m.protocol, m.port, c.vantage_id,
                             m.resolve_ns, m.handshake_ns
                        FROM measurements m JOIN campaigns c USING (campaign_id)
                       WHERE m.status = 'ok' AND m.rcode IS NOT NULL AND m.phase = 'measured' AND m.mode = 'fresh'""")
    r = _raw(conn, "SELECT campaign_id, host(address) AS address, transport, port, rtt_ns, status FROM rtt_samples")
    assert set(per["vantage_id"]) == set(spec.vantages)
    # one row per (vantage, protocol, answering resolver): the database's counts
    want_n = h.groupby(["vantage_id", "protocol"])["address"].nunique()
    got_n = per.groupby(["vantage_id", "protocol"])["address"].nunique()
    pd.testing.assert_series_equal(got_n.sort_index(), want_n.sort_index(), check_names=False)
    # medians of a sample of resolvers recomputed from raw rows (RTT: the median of each
    # campaign's samples, then the median over the resolver's queries)
    paired = stats.pair_ratio(h, r)
    for row in per.sample(n=min(40, len(per)), random_state=1).itertuples():
        sel = (h.vantage_id == row.vantage_id) & (h.protocol == row.protocol) & (h.address == row.address)
        assert row.queries == sel.sum()
        assert row.resolve_ns == pytest.approx(np.median(h[sel]["resolve_ns"].to_numpy(float)))
        psel = (paired.vantage_id == row.vantage_id) & (paired.protocol == row.protocol) & \
               (paired.address == row.address)
        rtts = paired[psel]["rtt_ns"].to_numpy(float)
        if len(rtts):
            assert row.rtt_ns == pytest.approx(np.median(rtts))
        else:
            assert np.isnan(row.rtt_ns)


def _per(base_ms: dict, extra_ms: dict, protocols=("doudp", "dotcp", "doq")) -> pd.DataFrame:
    """Per-resolver medians: vantage v sees resolver a at base_ms[a] + extra_ms[v]
    (resolve time twice the RTT, as a query after a one-round-trip handshake; no RTT for
    DoUDP)."""
    rows = []
    for v, extra in extra_ms.items():
        for p in protocols:
            for a, b in base_ms.items():
                rtt = (b + extra) * 1e6
                rows.append({"vantage_id": v, "protocol": p, "address": a, "queries": 1,
                             "resolve_ns": 2 * rtt, "handshake_ns": np.nan if p == "doudp" else rtt,
                             "rtt_ns": np.nan if p == "doudp" else rtt})
    return pd.DataFrame(rows)


def test_vantage_comparison_shift():
    base = {f"198.19.0.{i}": float(5 * i) for i in range(1, 8)}  # 5..35 ms
    extra = {"far": 12.5, "near": 0.0}
    t = stats.vantage_comparison(_per(base, extra), reference="near")
    assert set(t["vantage_id"]) == set(extra)
    assert list(t["protocol"].unique()) == ["doudp", "dotcp", "doq"]  # the study's order
    med = float(np.median(list(base.values())))
    for r in t.itertuples():
        assert r.resolvers == r.common_resolvers == len(base)
        assert r.reference == "near"
        assert r.resolve_median_ms == pytest.approx(2 * (med + extra[r.vantage_id]))
        assert r.resolve_delta_ms == pytest.approx(2 * (extra[r.vantage_id] - extra["near"]))
        if r.protocol == "doudp":
            assert r.rtt_resolvers == 0 and np.isnan(r.rtt_median_ms) and np.isnan(r.rtt_delta_ms)
        else:
            assert r.rtt_resolvers == len(base)
            assert r.rtt_median_ms == pytest.approx(med + extra[r.vantage_id])
            assert r.rtt_delta_ms == pytest.approx(extra[r.vantage_id] - extra["near"])


def test_vantage_comparison_only_common_resolvers():
    """A resolver answered from one vantage point only counts in that one's `resolvers`
    but not in the medians, which compare the same resolvers."""
    base = {"198.19.0.1": 10.0, "198.19.0.2": 20.0, "198.19.0.3": 30.0}
    per = _per(base, {"a": 0.0, "b": 4.0}, protocols=("dotcp",))
    lone = {"vantage_id": "b", "protocol": "dotcp", "address": "198.19.0.9", "queries": 1,
            "resolve_ns": 9e9, "handshake_ns": 9e9, "rtt_ns": 9e9}
    t = stats.vantage_comparison(pd.concat([per, pd.DataFrame([lone])], ignore_index=True))
    b = t[t.vantage_id == "b"].iloc[0]
    a = t[t.vantage_id == "a"].iloc[0]
    assert (a.resolvers, b.resolvers) == (3, 4)
    assert (a.common_resolvers, b.common_resolvers) == (3, 3)
    assert b.reference == "a"  # the first by id
    assert b.rtt_median_ms - a.rtt_median_ms == pytest.approx(4.0)
    assert b.rtt_delta_ms == pytest.approx(4.0)


def test_vantage_comparison_rtt_on_resolvers_with_rtt_everywhere():
    """An RTT answered from one vantage point only leaves that resolver out of the RTT
    medians of both (else they would compare different resolvers), not out of the
    resolve-time ones."""
    base = {"198.19.0.1": 10.0, "198.19.0.2": 20.0, "198.19.0.3": 90.0}
    per = _per(base, {"a": 0.0, "b": 4.0}, protocols=("dotcp",))
    per.loc[(per.vantage_id == "b") & (per.address == "198.19.0.3"), "rtt_ns"] = np.nan
    t = stats.vantage_comparison(per).set_index("vantage_id")
    assert list(t["rtt_resolvers"]) == [2, 2]
    assert t.loc["a", "rtt_median_ms"] == pytest.approx(15.0)
    assert t.loc["b", "rtt_median_ms"] == pytest.approx(19.0)
    assert t.loc["b", "rtt_delta_ms"] == pytest.approx(4.0)
    assert t.loc["b", "resolve_median_ms"] == pytest.approx(2 * 24.0)  # all three resolvers


def test_vantage_comparison_empty():
    t = stats.vantage_comparison(pd.DataFrame(columns=["vantage_id", "protocol", "address"]))
    assert t.empty and "rtt_median_ms" in t.columns


def test_vantage_figure_and_csv(tmp_path):
    per = _per({f"198.19.0.{i}": float(i) for i in range(1, 6)}, {"vp0": 0.0, "vp1": 10.0})
    t = stats.vantage_comparison(per)
    fig = plots.vantage_figure(per, t)
    paths = plots.save(fig, str(tmp_path), "vantage_comparison")
    assert all(os.path.getsize(p) > 0 for p in paths)
    csv = plots.save_table(t, str(tmp_path), "vantage_comparison")
    back = pd.read_csv(csv)
    assert list(back.columns) == list(t.columns)
    assert back["rtt_median_ms"].equals(t["rtt_median_ms"]) or np.allclose(
        back["rtt_median_ms"].fillna(-1), t["rtt_median_ms"].fillna(-1))
    # one difference line per protocol for the one other vantage point
    lines = [ln for ln in fig.axes[2].get_lines() if ln.get_label().startswith(("DoUDP", "DoTCP", "DoQ"))]
    assert len(lines) == 3
    assert plots.save_table(t, None, "x") is None
