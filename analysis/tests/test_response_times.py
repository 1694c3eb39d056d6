"""Response-time figures against the synthetic spec (DoX set, DoQ round-trip classes)
and against raw rows recomputed in Python (ECDF ranks, RTT pairing)."""

import numpy as np
import pandas as pd
import psycopg
import pytest

from doqscan_analysis import facts, load, names, stats, synth


@pytest.fixture(scope="module")
def truth(spec):
    return synth.expected(spec)


def test_dox_and_answering(conn, truth, spec):
    df = load.answering(conn)
    for v in spec.vantages:
        got = dict(zip(df[df.vantage_id == v]["protocol"], df[df.vantage_id == v]["resolvers"]))
        assert got["dox"] == truth["dox"]
        assert got["doq"] == truth["targets"]


def test_doq_round_trip_classes(conn, truth, spec):
    """Handshake/RTT ratios paired in SQL and rounded give back the spec's classes."""
    df = load.ratio_classes(conn)
    d = df[(df.protocol == "doq") & (df.phase == "measured") & (df["mode"] == "fresh")]
    got = {(r.vantage_id, r.round_trips): r.measurements for r in d.itertuples()}
    assert got == truth["doq_round_trips"]
    # the same classes from response_times' single pass
    rt = load.response_times(conn)
    shares = stats.round_trip_shares_from(rt)
    for v in spec.vantages:
        n = sum(c for (vp, k), c in truth["doq_round_trips"].items() if vp == v)
        row = shares.loc[(v, "doq", "measured", "fresh")]
        for k in range(1, 6):
            assert row.get(k, 0.0) == pytest.approx(truth["doq_round_trips"].get((v, k), 0) / n)
    # DoTCP is one round trip, DoT and DoH two (TLS 1.3), always
    for proto, rt in (("dotcp", 1), ("dot", 2), ("doh", 2)):
        assert set(df[df.protocol == proto]["round_trips"]) == {rt}


def test_doq_causes(conn, truth, spec):
    df = load.doq_causes(conn)
    fresh = df[(df.phase == "measured") & (df["mode"] == "fresh")]
    per = fresh.groupby("cause")["handshakes"].sum()
    # the causes add up to the classes of the same (cause, round trips) rows
    rt_of = {c: r for c, r, _ in spec.doq_classes}
    for cause, n in per.items():
        assert n == sum(v for (vp, rt), v in truth["doq_round_trips"].items() if rt == rt_of[cause])
    shares = stats.cause_shares(fresh, by=("key_share",))
    assert set(shares.index) == set(spec.key_shares)
    assert np.allclose(shares.sum(axis=1), 1.0)


def _raw(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return pd.DataFrame(cur.fetchall(), columns=[d.name for d in cur.description])


def test_distributions_match_raw_rows(conn):
    """Medians, means and ECDF order statistics from SQL equal numpy on the raw rows,
    and the SQL ratio pairing equals stats.pair_ratio."""
    points = 500
    rt = load.response_times(conn, group_by=("vantage_id", "protocol", "phase", "mode"), points=points,
                             require_rtt=False)
    h = _raw(conn, """SELECT m.campaign_id, host(m.address) AS address, m.protocol, m.port, m.phase, m.mode,
                             c.vantage_id, m.handshake_ns, m.resolve_ns
                        FROM measurements m JOIN campaigns c USING (campaign_id)
                       WHERE m.status = 'ok' AND m.rcode IS NOT NULL""")
    r = _raw(conn, "SELECT campaign_id, host(address) AS address, transport, port, rtt_ns, status FROM rtt_samples")
    paired = stats.pair_ratio(h[h.handshake_ns.notna()], r)
    for row in rt.itertuples():
        sel = (h.vantage_id == row.vantage_id) & (h.protocol == row.protocol) & (h.phase == row.phase) & (h["mode"] == row.mode)
        vals = h[sel]["resolve_ns"].to_numpy(float)
        assert row.resolve_ns_n == len(vals)
        assert row.resolve_ns_median == pytest.approx(np.median(vals))
        assert row.resolve_ns_mean == pytest.approx(vals.mean())
        x, _ = stats.ecdf(vals)
        ranks = np.ceil(np.arange(1, points + 1) / points * len(x)).astype(int) - 1
        assert np.array_equal(row.resolve_ns_q, x[ranks])
        psel = (paired.vantage_id == row.vantage_id) & (paired.protocol == row.protocol) & \
               (paired.phase == row.phase) & (paired["mode"] == row.mode)
        ratios = paired[psel]["ratio"].to_numpy(float)
        assert row.ratio_n == len(ratios)
        if len(ratios):
            assert row.ratio_median == pytest.approx(np.median(ratios))


def test_dox_only_filter(conn, truth):
    rt = load.response_times(conn, dox_only=True, group_by=("vantage_id", "protocol", "phase", "mode"))
    assert rt["resolvers"].max() == truth["dox"]
    assert (rt["resolvers"] <= truth["dox"]).all()


def test_bad_group_by(conn):
    with pytest.raises(ValueError):
        load.response_times(conn, group_by=("address; DROP TABLE measurements",))


def _frames_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for col in a.columns:
        if col.endswith("_q"):
            for x, y in zip(a[col], b[col]):
                assert np.array_equal(x, y), col
        else:
            pd.testing.assert_series_equal(a[col], b[col], check_names=False)


def test_rtt_medians_cache(conn, monkeypatch):
    """rtt_medians (migration 0002) holds numpy's median of every key's answered samples
    for every finished campaign, and results are the same whether a campaign's RTTs come
    from the cache or from the samples (half the campaigns uncached in a rolled-back
    transaction); running campaigns are never cached."""
    assert load.has_rtt_medians(conn)
    load.refresh_rtt_medians(conn)
    assert load.refresh_rtt_medians(conn) == 0  # nothing left to do
    r = _raw(conn, """SELECT campaign_id, host(address) AS address, transport, port, rtt_ns::float8 AS rtt_ns
                        FROM rtt_samples WHERE status = 'ok' AND rtt_ns > 0""")
    want = r.groupby(["campaign_id", "address", "transport", "port"])["rtt_ns"].agg(["median", "size"])
    got = _raw(conn, """SELECT campaign_id, host(address) AS address, transport, port, rtt_ns, samples
                          FROM rtt_medians""").set_index(["campaign_id", "address", "transport", "port"])
    assert len(got) == len(want) > 0
    got = got.loc[want.index]
    assert np.allclose(got["rtt_ns"].to_numpy(float), want["median"].to_numpy(float), rtol=0, atol=1e-6)
    assert np.array_equal(got["samples"].to_numpy(int), want["size"].to_numpy(int))

    full = load.response_times(conn)
    monkeypatch.setattr(facts, "PARALLEL", 1)  # other connections would not see the rolled-back changes
    ids = [x[0] for x in conn.execute("SELECT campaign_id FROM rtt_median_campaigns ORDER BY 1").fetchall()]
    with conn.transaction():  # psycopg.Rollback below undoes it and is swallowed by the block
        conn.execute("DELETE FROM rtt_median_campaigns WHERE campaign_id = ANY(%s)", (ids[::2],))
        _frames_equal(load.response_times(conn, refresh=False), full)
        conn.execute("UPDATE campaigns SET status = 'running', finished_at = NULL WHERE campaign_id = ANY(%s)",
                     (ids[::2],))
        assert load.refresh_rtt_medians(conn) == 0
        _frames_equal(load.response_times(conn), full)
        raise psycopg.Rollback()


@pytest.mark.parametrize("kw", [{}, {"dox_only": True, "points": 300},
                                {"group_by": ("protocol", "mode"), "require_rtt": False}])
def test_numpy_path_equals_sql(conn, kw):
    """response_times (measurement_facts + numpy) gives the numbers of response_times_sql (all
    in PostgreSQL): counts, resolvers, order statistics and round-trip classes exactly,
    medians and means up to float rounding."""
    a = load.response_times(conn, **kw)
    b = load.response_times_sql(conn, **kw)
    assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
    for col in a.columns:
        for x, y in zip(a[col], b[col]):
            if col.endswith("_q"):
                assert np.array_equal(x, y), col
            elif col.endswith(("_mean", "_median")):
                assert (x is None or np.isnan(x)) == (y is None or np.isnan(y)) and \
                    (x is None or np.isnan(x) or x == pytest.approx(y, rel=1e-12)), col
            else:
                assert x == y, (col, x, y)


def test_measurement_facts_cache(conn, monkeypatch):
    """measurement_facts (migration 0003) holds one record per successful measurement of
    every finished campaign, and every figure is the same whether a campaign's facts come
    from the cache, from the measurements joined with cached RTTs, or with RTTs sorted
    from the samples (markers removed in a rolled-back transaction)."""
    assert load.has_measurement_facts(conn)
    load.measurement_facts(conn)  # fills both caches
    assert load.refresh_measurement_facts(conn) == 0  # nothing left to do
    per = dict(conn.execute("""SELECT campaign_id, count(*) FROM measurements
                                WHERE status = 'ok' AND rcode IS NOT NULL GROUP BY 1""").fetchall())
    got = dict(conn.execute("SELECT campaign_id, measurements FROM measurement_fact_campaigns").fetchall())
    assert got == per and len(per) > 0
    assert conn.execute("SELECT sum(measurements) FROM measurement_facts").fetchone()[0] == sum(per.values())

    kw = {"group_by": ("vantage_id", "protocol", "phase", "mode", "key_share", "dox")}
    full = load.response_times(conn, **kw)
    ans = load.answering(conn)
    monkeypatch.setattr(facts, "PARALLEL", 1)  # other connections would not see the rolled-back changes
    ids = sorted(per)
    with conn.transaction():
        conn.execute("DELETE FROM measurement_fact_campaigns WHERE campaign_id = ANY(%s)", (ids[::2],))
        conn.execute("DELETE FROM rtt_median_campaigns WHERE campaign_id = ANY(%s)", (ids[1::4],))
        camps = facts._selected_campaigns(conn, None, None)
        assert {c[3] for c in camps} == {True, False} and {c[2] for c in camps} == {True, False}
        f = load.measurement_facts(conn, refresh=False)
        _frames_equal(load.response_times(conn, facts=f, **kw), full)
        pd.testing.assert_frame_equal(load.answering(conn, facts=f), ans)
        raise psycopg.Rollback()


def test_doq_causes_from_facts_equals_sql(conn):
    """doq_causes counted in numpy from measurement_facts equals the SQL aggregation."""
    key = ["vantage_id", "phase", "mode", "key_share", "implementation", "cause"]
    a = load.doq_causes(conn, facts=load.measurement_facts(conn)).sort_values(key).reset_index(drop=True)
    b = load.doq_causes(conn).sort_values(key).reset_index(drop=True)
    assert len(a) > 0
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


def test_fetched_facts_follow_a_longer_protocol_table(conn, monkeypatch):
    """Measurements fetched at query time carry their categories packed into one number
    whose radices follow names' tables: with eight more protocols ahead of the real ones
    (a longer table, as the protocol list may grow), every figure is unchanged (fixed
    radices broke past 7 protocols)."""
    kw = {"group_by": ("vantage_id", "protocol", "phase", "mode", "key_share", "dox")}
    monkeypatch.setattr(facts, "has_measurement_facts", lambda c: False)  # every campaign fetched
    want = load.response_times(conn, refresh=False, **kw)
    want_ans = load.answering(conn, refresh=False)
    monkeypatch.setattr(names, "PROTOCOLS", [f"future{i}" for i in range(8)] + list(names.PROTOCOLS))
    f = load.measurement_facts(conn, refresh=False)
    assert len(f) > 0 and int(f.protocol.min()) >= 8
    _frames_equal(load.response_times(conn, facts=f, **kw), want)
    pd.testing.assert_frame_equal(load.answering(conn, facts=f), want_ans)


def _relations_read(conn, sql, params) -> set[str]:
    """The tables `sql` read when run (EXPLAIN ANALYZE in a rolled-back transaction):
    plan nodes that ran at least once."""
    out = set()

    def walk(node):
        if node.get("Relation Name") and node.get("Actual Loops", 0) > 0:
            out.add(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    with conn.transaction():
        for t in ("measurement_facts", "rtt_medians"):  # a fill into an emptied cache, as _refill does
            conn.execute(f"DELETE FROM {t} WHERE campaign_id = ANY(%(ids)s)", params)
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()[0]
        walk(plan[0]["Plan"])
        raise psycopg.Rollback()
    return out


def test_per_campaign_fills_read_only_their_months(conn):
    """The per-campaign cache fills name their campaigns' round hours, so PostgreSQL reads
    only those months' partitions of measurements, rtt_samples and handshake_analyses:
    their time stays flat as months are stored (the executed plan is checked, not a time)."""
    from doqscan_analysis import rtt

    leaves = {t: {r[0] for r in conn.execute(
        "SELECT relid::text FROM pg_partition_tree(%s) WHERE isleaf", (t,)).fetchall()}
        for t in ("measurements", "rtt_samples", "handshake_analyses")}
    assert all(len(p) >= 2 for p in leaves.values()), leaves  # months ahead exist: pruning has a choice
    cid, hour = conn.execute("""SELECT campaign_id, round_hour FROM campaigns c
                                 WHERE EXISTS (SELECT FROM handshake_analyses h JOIN measurements m USING (measurement_id)
                                                WHERE m.campaign_id = c.campaign_id)
                                 ORDER BY 1 LIMIT 1""").fetchone()
    month = conn.execute("SELECT to_char(%s::timestamptz AT TIME ZONE 'UTC', '\"_p\"YYYY_MM')", (hour,)).fetchone()[0]
    params = {"ids": [cid], "hours": rtt.campaign_hours(conn, [cid]), "causes": facts.CAUSES}
    assert params["hours"] == [hour]
    read = _relations_read(conn, facts._FACTS_FILL, params) | _relations_read(conn, rtt._RTT_FILL, params)
    for table, parts in leaves.items():
        assert read & parts == {table + month}, (table, sorted(read))
