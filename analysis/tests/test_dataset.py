"""Imported study data (`dataset import`, cmd/dataset) read by the analysis package.

- The pre-study's files (../shared/datasets/dns-analysis-2021, or $DOQSCAN_DATASETS):
  verified resolvers per week, the 05-07-2021 scan port split, certificate names and
  locations, each against the files themselves (skipped with the reason when the
  datasets are absent).
- A performance database in the study's documented schema, written from doqscan's own
  rows (the synthetic generator's): the response-time functions compute the same
  distributions (ratios included) from the imported rows as from the originals.
- One report over a database holding a synthetic (testbed-like) source and imported
  ones: both notebooks run, show the sources side by side and say where the port was
  not recorded.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import shutil
import sqlite3
import subprocess

import numpy as np
import psycopg
import pytest

from doqscan_analysis import load, report, stats, synth

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXCERPT = os.path.join(ROOT, "internal", "dataset", "testdata", "pam2022-excerpt")
# The study's weekly verified counts (line counts of results/*-verified.csv; the
# datasets README and the "Done when").
PRE_STUDY_WEEKLY = [869, 873, 889, 875, 892, 887, 888, 890, 921, 930, 924]


def datasets_dir() -> str | None:
    """$DOQSCAN_DATASETS, else ../shared/datasets beside the repository (or beside a
    parent directory, for a git worktree)."""
    if os.environ.get("DOQSCAN_DATASETS"):
        return os.environ["DOQSCAN_DATASETS"]
    d = ROOT
    while True:
        cand = os.path.join(os.path.dirname(d), "shared", "datasets")
        if os.path.isdir(cand) or os.path.dirname(d) == d:
            return cand
        d = os.path.dirname(d)


def _pre_study() -> str:
    d = os.path.join(datasets_dir() or "", "dns-analysis-2021")
    if not os.path.isdir(d):
        pytest.skip(f"the study's datasets are not here ({d}; set DOQSCAN_DATASETS): whole-dataset figures not checked")
    return d


@pytest.fixture(scope="session")
def dataset_bin(tmp_path_factory):
    """The dataset tool, built from this checkout (so it matches the migrations)."""
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH: cannot build cmd/dataset to import")
    out = tmp_path_factory.mktemp("bin")
    subprocess.run(["go", "build", "-o", str(out), "./cmd/dataset"], cwd=ROOT, check=True)
    return str(out / "dataset")


def run_import(binary: str, url: str, directory: str, *flags: str) -> dict:
    env = dict(os.environ, DATABASE_URL=url)
    p = subprocess.run([binary, "import", *flags, directory], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _lines(path: str) -> set[str]:
    with open(path) as f:
        return {s for s in (line.strip() for line in f) if s and s != "0.0.0.0"}


def _week(ddmmyyyy: str) -> str:
    import datetime as dt
    d = dt.datetime.strptime(ddmmyyyy, "%d-%m-%Y").date()
    y, w, _ = d.isocalendar()
    return f"{y}-W{w:02d}"


# ----------------------------------------------------------------------------------
# The pre-study.

@pytest.fixture(scope="module")
def pre_study_db(fresh_db, dataset_bin):
    pre = _pre_study()
    url = fresh_db()
    run_import(dataset_bin, url, pre)
    with psycopg.connect(url, autocommit=True) as c:
        yield c, pre


def _files_by_week(pre: str):
    """week -> (verified on the 784/8853 verifier, on the 853 verifier, scan 784, scan 8853)."""
    out = {}
    for f in sorted(glob.glob(os.path.join(pre, "results", "*-verified.csv"))):
        base = os.path.basename(f)
        d = base[:10]
        w = out.setdefault(_week(d), {"v": set(), "v853": set(), "784": set(), "8853": set()})
        (w["v853"] if base.endswith("-853-verified.csv") else w["v"]).update(_lines(f))
        for port in ("784", "8853"):
            w[port] = _lines(os.path.join(pre, "results", f"{d}-{port}.csv"))
    return dict(sorted(out.items()))


def test_pre_study_verified_per_week(pre_study_db):
    conn, pre = pre_study_db
    files = _files_by_week(pre)
    unk = load.ports_not_recorded(conn)
    assert list(unk["not_recorded"]) == PRE_STUDY_WEEKLY
    assert list(unk["not_recorded"]) == [len(w["v"]) for w in files.values()]
    # every verified resolver of the week: the 784/8853 lists and the UDP/853 lists
    pairs = load.verified_by_pair(conn).groupby("iso_week")["resolvers"].sum()
    assert list(pairs.index) == list(files)
    assert list(pairs) == [len(w["v"] | w["v853"]) for w in files.values()] == list(unk["total"])
    # port shares: only ports the source recorded (853 here), never port 0
    ports = load.port_shares(conn)
    assert set(ports["port"]) == {853}
    assert {r.iso_week: r.resolvers for r in ports.itertuples()} == {w: len(f["v853"]) for w, f in files.items() if f["v853"]}


def test_pre_study_scan_split(pre_study_db):
    conn, pre = pre_study_db
    files = _files_by_week(pre)
    unk = load.ports_not_recorded(conn).set_index("iso_week")
    w27 = unk.loc["2021-W27"]
    assert (w27.scan_784_only, w27.scan_8853_only, w27.scan_both, w27.scan_neither) == (690, 171, 14, 0)
    for wk, f in files.items():
        v, a, b = f["v"], f["784"], f["8853"]
        r = unk.loc[wk]
        assert (r.scan_784_only, r.scan_8853_only, r.scan_both) == (len(v & a - b), len(v & b - a), len(v & a & b)), wk
    note = stats.ports_not_recorded_note(load.ports_not_recorded(conn))
    assert "did not record" in note and "2021-W24 to 2021-W34" in note


def test_pre_study_certificate_names(pre_study_db):
    conn, pre = pre_study_db
    files = _files_by_week(pre)
    first, last = list(files)[0], list(files)[-1]
    prov = load.top_providers(conn, top=1000)
    for name, wk in (("certs.csv", first), ("certs-last.csv", last)):
        verified = files[wk]["v"] | files[wk]["v853"]
        with open(os.path.join(pre, name)) as f:
            quic = {}
            for ip, proto, port, info in csv.reader(f):
                if proto == "quic" and ip in verified:
                    quic.setdefault(ip, {})[int(port)] = json.loads(info)["CommonName"]
        named = {ip for ip, byport in quic.items()
                 if next(byport[p] for p in (853, 784, 8853) if p in byport)}
        got = prov[(prov["iso_week"] == wk) & (prov["subject_cn"] != "(no CN)")]["resolvers"].sum()
        assert got == len(named) > 0, (name, wk)
    # weeks without a certificate file: no names, said as such
    mid = prov[prov["iso_week"] == list(files)[3]]
    assert set(mid["subject_cn"]) == {"(no CN)"}
    counts = load.certificate_counts(conn).set_index("iso_week")
    assert counts.loc[first, "certificates"] > 0


def test_pre_study_locations(pre_study_db):
    conn, pre = pre_study_db
    files = _files_by_week(pre)
    wk = list(files)[-1]
    verified = files[wk]["v"] | files[wk]["v853"]
    with open(os.path.join(pre, "ip-location.csv")) as f:
        loc = {r["ip"]: r["countryCode"] for r in csv.DictReader(f)}
    countries = load.geo_counts(conn, "country", week=wk)
    assert countries["resolvers"].sum() == len(verified)
    known = countries[countries["country"] != "??"]["resolvers"].sum()
    assert known == len([a for a in verified if loc.get(a)])
    cont = load.geo_counts(conn, "continent", week=wk)
    assert cont[cont["continent"] != "??"]["resolvers"].sum() == known  # every country has a continent
    assert load.geo_points(conn, week=wk)["resolvers"].sum() == known


def test_pre_study_report(pre_study_db, tmp_path):
    """Both notebooks run on the pre-study alone (scans, lists, certificates, locations,
    no measurements) and say that the port was not recorded."""
    conn, _ = pre_study_db
    url = conn.info.dsn
    s = report.run(url, str(tmp_path))
    assert not {k: v["error"] for k, v in s["notebooks"].items() if v["error"]}
    for name in ("fig1_doq_quic_versions_per_week", "port_shares", "top_providers", "fig2_world_map"):
        assert f"{name}.png" in set(s["figures"]), name
    with open(os.path.join(s["folder"], "adoption.html")) as f:
        html = f.read()
    assert "Port not recorded" in html and "dns-analysis-2021" in html


# ----------------------------------------------------------------------------------
# A performance database in the study's schema, written from doqscan's own rows.

# The study's performance database schema, shared with internal/dataset's tests.
with open(os.path.join(ROOT, "internal", "dataset", "testdata", "perf-schema.sql")) as _f:
    PERF_SCHEMA = _f.read()
TO_STUDY = {"doudp": "udp", "dotcp": "tcp", "dot": "tls", "doh": "https", "doq": "quic"}
TRANSPORT = {"doudp": "udp", "dotcp": "tcp", "dot": "tcp", "doh": "tcp", "doq": "quic"}


def export_perf(conn, vantage: str, path: str) -> int:
    """Write `vantage`'s fresh-mode measurements into a performance database in the
    study's schema: the warm-up and measured query of one (campaign, address, protocol,
    port) share an id; DoT/DoH handshakes split into TCP + TLS; one traceroute per id
    whose destination hop carries the RTT doqscan pairs with the measurement (the median
    of its samples); the hop before it is a router. Returns the measurements written."""
    rows = conn.execute("""
        SELECT m.campaign_id, host(m.address), m.protocol, m.port, m.phase, m.status,
               extract(epoch FROM m.started_at)::bigint, m.handshake_ns, m.resolve_ns, m.rcode, m.quic_version,
               m.alpn,
               (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s.rtt_ns) FROM rtt_samples s
                 WHERE s.campaign_id = m.campaign_id AND s.address = m.address AND s.port = m.port
                   AND s.transport = CASE m.protocol WHEN 'doudp' THEN 'udp' WHEN 'doq' THEN 'quic' ELSE 'tcp' END
                   AND s.status = 'ok' AND s.rtt_ns > 0)
          FROM measurements m JOIN campaigns c USING (campaign_id)
         WHERE c.vantage_id = %s AND m.mode = 'fresh' ORDER BY 1, 2, 3, 5""", (vantage,)).fetchall()
    db = sqlite3.connect(path)
    db.executescript(PERF_SCHEMA)
    traced = set()
    for cid, ip, proto, port, phase, status, created, hs, res, rcode, qv, alpn, rtt in rows:
        mid = f"{cid}-{ip}-{proto}-{port}"
        tcp = tls = quic = None
        if proto == "dotcp":
            tcp = hs
        elif proto in ("dot", "doh") and hs is not None:
            tcp = hs // 3
            tls = hs - tcp
        elif proto == "doq":
            quic = hs
        db.execute("""INSERT INTO dns_measurements (id, cache_warming, ip, port, protocol, created, updated,
                          tcp_handshake_duration, tls_handshake_duration, q_ui_c_handshake_duration, q_ui_c_version,
                          q_ui_c_negotiated_protocol, query_time, r_code, response_ip, error)
                      VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)""",
                   (mid, phase == "warmup", ip, port, TO_STUDY[proto], created, created, tcp, tls, quic, qv,
                    alpn or "", res, rcode, "192.0.2.1", "" if status == "ok" else status))
        if rtt is not None and mid not in traced:
            traced.add(mid)
            db.execute("INSERT INTO traceroutes VALUES (?, ?, 1, ?, ?, ?, ?, ?)",
                       (mid, "2026-01-01 00:00:00+00:00", ip, port, TRANSPORT[proto], "198.18.0.1", 1000))
            db.execute("INSERT INTO traceroutes VALUES (?, ?, 2, ?, ?, ?, ?, ?)",
                       (mid, "2026-01-01 00:00:00+00:00", ip, port, TRANSPORT[proto], ip, int(rtt)))
    db.commit()
    db.close()
    return len(rows)


@pytest.fixture(scope="module")
def side_by_side_db(fresh_db, dataset_bin, tmp_path_factory):
    """A synthetic source (vantage synth-a), the same rows imported from a performance
    database (vantage pam2022-fixture), and the committed excerpt of the pre-study."""
    url = fresh_db()
    spec = synth.default_spec(vantages=["synth-a"], hours=2, targets=40, doq_modes=[])
    d = tmp_path_factory.mktemp("perf")
    with psycopg.connect(url, autocommit=True) as c:
        synth.generate(c, spec)
        n = export_perf(c, "synth-a", str(d / "pam2022-w03.db"))
    assert n > 0
    s1 = run_import(dataset_bin, url, str(d), "--vantage", "pam2022-fixture", "--label", "perf-fixture")
    s2 = run_import(dataset_bin, url, EXCERPT)
    return url, n, s1, s2


def test_ratios_same_from_imported_rows(side_by_side_db):
    url, n, s1, _ = side_by_side_db
    assert s1["new_rows"]["measurements"] == n
    with psycopg.connect(url, autocommit=True) as conn:
        rt = load.response_times(conn)
    compared = 0
    for phase in ("measured", "warmup"):
        for dox in (True, False):
            a = stats.figure_rows(rt, vantage="synth-a", phase=phase, dox=dox).set_index("protocol")
            b = stats.figure_rows(rt, vantage="pam2022-fixture", phase=phase, dox=dox).set_index("protocol")
            assert sorted(a.index) == sorted(b.index), (phase, dox)
            for proto in a.index:
                for met in load.METRICS:
                    assert a.loc[proto, f"{met}_n"] == b.loc[proto, f"{met}_n"], (phase, dox, proto, met)
                    assert np.array_equal(a.loc[proto, f"{met}_q"], b.loc[proto, f"{met}_q"], equal_nan=True), \
                        (phase, dox, proto, met)
                    if a.loc[proto, f"{met}_n"]:
                        assert a.loc[proto, f"{met}_median"] == b.loc[proto, f"{met}_median"]
                compared += 1
    assert compared >= 8
    assert rt[(rt["vantage_id"] == "pam2022-fixture") & (rt["protocol"] == "doq")]["ratio_n"].sum() > 0
    side = stats.side_by_side(rt)
    assert ("ratio median", "synth-a") in side.columns and ("ratio median", "pam2022-fixture") in side.columns
    assert side[("ratio median", "synth-a")].equals(side[("ratio median", "pam2022-fixture")])  # DoUDP: NaN both


def test_one_report_side_by_side(side_by_side_db, tmp_path):
    url, _, _, s2 = side_by_side_db
    s = report.run(url, str(tmp_path))
    errors = {k: v["error"] for k, v in s["notebooks"].items() if v["error"]}
    assert not errors
    import nbformat

    def text(name):
        nb = nbformat.read(os.path.join(s["folder"], f"{name}.ipynb"), as_version=4)
        out = []
        for c in nb.cells:
            for o in c.get("outputs", []):
                out.append(o.get("text", ""))
                out.extend(str(v) for k, v in o.get("data", {}).items() if k.startswith("text/"))
        return "\n".join(out)

    adoption, rtimes = text("adoption"), text("response_times")
    # the sources table names the synthetic rounds and both imports
    for vp in ("synth-a", "pam2022-fixture", "pam2022-tum"):
        assert vp in adoption
    assert s2["label"] in adoption and "perf-fixture" in adoption
    # the excerpt's lists did not record the port: said, not guessed
    assert "Port not recorded" in adoption
    # response times: both vantage points' figures and the side-by-side table
    figs = set(s["figures"])
    for vp in ("synth-a", "pam2022-fixture"):
        assert f"fig3b_handshake_ratio_{vp}.png" in figs
    assert "Sources side by side" not in rtimes  # markdown is not an output; the table is
    assert "pam2022-fixture" in rtimes and "synth-a" in rtimes
