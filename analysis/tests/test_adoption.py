"""Adoption figures against the synthetic spec's ground truth (synth.expected)."""

import pytest

from doqscan_analysis import load, stats, synth


@pytest.fixture(scope="module")
def truth(spec):
    return synth.expected(spec)


def test_weeks(conn, truth):
    assert load.weeks(conn) == truth["weeks"]


def test_resolvers_per_version_pair(conn, truth):
    df = load.verified_by_pair(conn)
    got = {(r.iso_week, r.alpn, int(r.quic_version)): int(r.resolvers) for r in df.itertuples()}
    assert got == truth["pairs"]
    per_week = df.groupby("iso_week")["resolvers"].sum().to_dict()
    assert per_week == truth["totals"]


def test_verification_outcomes(conn, truth):
    """Addresses per week and outcome, doq-no-alpn hosts counted apart from resolvers."""
    df = load.verification_outcomes(conn)
    got = {(r.iso_week, r.outcome): int(r.addresses) for r in df.itertuples()}
    assert got == truth["outcomes"]
    assert any(o == "doq-no-alpn" for _, o in got)
    wk = truth["weeks"][0]
    assert set(load.verification_outcomes(conn, weeks=[wk])["iso_week"]) == {wk}


def test_port_shares(conn, truth):
    df = load.port_shares(conn)
    for r in df.itertuples():
        want = truth["port_resolvers"][(r.iso_week, r.port)]
        assert r.resolvers == want
        assert r.share == pytest.approx(want / truth["totals"][r.iso_week])
    assert len(df) == len(truth["port_resolvers"])


def test_week_filter(conn, truth):
    wk = truth["weeks"][1]
    df = load.verified_by_pair(conn, weeks=[wk])
    assert set(df["iso_week"]) == {wk}
    assert df["resolvers"].sum() == truth["totals"][wk]
    assert load.verified_by_pair(conn, vantages=["no-such-vantage"]).empty


def test_retention(conn, truth):
    doq = load.membership_by_week(conn, "doq")
    assert stats.retention_first_to_last(doq) == pytest.approx(truth["doq_retention"])
    udp = load.membership_by_week(conn, "doudp")
    assert stats.retention_first_to_last(udp) == pytest.approx(truth["doudp_retention"])
    c = stats.churn(doq)
    # new - gone equals the change in size, week over week
    for a, b in zip(c.iloc[:-1].itertuples(), c.iloc[1:].itertuples()):
        assert b.new - b.gone == b.total - a.total


def test_continents_last_week(conn, truth):
    df = load.geo_counts(conn, "continent")
    assert dict(zip(df["continent"], df["resolvers"])) == truth["continents_last"]
    pts = load.geo_points(conn)
    assert pts["resolvers"].sum() == sum(truth["continents_last"].values())


def test_providers(conn, truth, spec):
    df = load.top_providers(conn, top=len(spec.pairs))
    got = {(r.iso_week, r.subject_cn): r.resolvers for r in df.itertuples()}
    assert got == {k: v for k, v in truth["providers"].items() if v}
    top1 = load.top_providers(conn, top=1)
    assert set(top1["subject_cn"]) <= {"other"} | {p.cn for p in spec.pairs}
    assert top1.groupby("iso_week")["resolvers"].sum().to_dict() == truth["totals"]


def test_fingerprints(conn, truth, spec):
    """Resolvers per stack fingerprint equal the resolvers of the pairs advertising that
    list (half the synthetic results carry scan_versions, half need the scan's reply)."""
    df = load.stack_fingerprints(conn)
    want: dict = {}
    from doqscan_analysis import names
    for (wk, alpn, qv), n in truth["pairs"].items():
        p = next(p for p in spec.pairs if p.alpn == alpn and p.quic_version == qv)
        key = (wk, names.fingerprint_name(p.vn_versions))
        want[key] = want.get(key, 0) + n
    got = {(r.iso_week, r.fingerprint): r.addresses for r in df.itertuples()}
    assert got == want


def test_scan_versions_count_quic_hosts(conn, truth, spec):
    df = load.scan_versions(conn)
    for wk in truth["weeks"]:
        w = df[df["iso_week"] == wk]
        assert w["vn_addresses"].iloc[0] == truth["totals"][wk] + spec.other_quic
        assert "grease" in set(w["version_name"])
