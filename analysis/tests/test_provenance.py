"""load.provenance: what produced each scan, verification run and round, read from the
provenance column every stage writes (migration 0008), against rows whose records are
known because the test writes them."""

import json

import psycopg

from doqscan_analysis import load


def _record(tool, revision, vantage, **extra):
    rec = {"tool": tool, "build": {"version": "0.1.0-dev", "revision": revision, "go_version": "go1.26.0"},
           "host": "scanner-1", "vantage": vantage}
    rec.update(extra)
    return rec


def test_provenance_one_row_per_run_newest_record(fresh_db):
    url = fresh_db()
    vp = {"id": "fra1", "location": "Frankfurt, DE", "contact": "noc@example.org"}
    old = _record("zprobe", "a" * 40, vp, zmap={"binary": "zmap", "path": "/usr/sbin/zmap", "version": "zmap 2.1.1"},
                  probes=[{"kind": "quic-vn", "ports": [784, 853], "sha256": "ab" * 32},
                          {"kind": "dns", "ports": [53], "sha256": "cd" * 32}])
    new = dict(old, build={"version": "0.1.0-dev", "revision": "b" * 40, "modified": True, "go_version": "go1.26.0"})
    ver = _record("verify", "b" * 40, vp, geoip=[{"kind": "geoip-city", "build_time": "2026-11-17T00:00:00Z", "sha256": "00" * 32},
                                                 {"kind": "geoip-asn", "build_time": "2026-11-16T00:00:00Z", "sha256": "11" * 32}])
    mea = _record("measure", "b" * 40, vp)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("INSERT INTO vantage_points (vantage_id, location, contact) VALUES ('fra1', %s, %s), ('old', '', '')",
                  (vp["location"], vp["contact"]))
        c.execute("INSERT INTO scans (iso_week, vantage_id, ports, provenance) VALUES ('2026-W47', 'fra1', '{784,853,53}', %s)",
                  (json.dumps([old, new]),))
        c.execute("INSERT INTO scans (iso_week, vantage_id, ports) VALUES ('2026-W46', 'old', '{853}')")  # before 0007
        c.execute("INSERT INTO verification_runs (iso_week, vantage_id, provenance) VALUES ('2026-W47', 'fra1', %s)",
                  (json.dumps([ver]),))
        c.execute("""INSERT INTO campaigns (vantage_id, round_hour, provenance)
                     VALUES ('fra1', '2026-11-22T04:00:00Z', %s)""", (json.dumps([mea]),))
        conn = load.connect(url)
        df = load.provenance(conn)
        w47 = load.provenance(conn, weeks=["2026-W47"], vantages=["fra1"])
        conn.close()
    assert list(df.columns) == load.PROVENANCE_COLUMNS
    assert len(df) == 4
    assert sorted(w47["stage"]) == ["measure", "scan", "verify"]
    scan = w47[w47.stage == "scan"].iloc[0]
    assert scan.records == 2 and scan.revision == "b" * 12 and bool(scan.modified)  # the newest record
    assert scan.zmap == "zmap 2.1.1" and scan.probes == f"quic-vn {'ab' * 6}, dns {'cd' * 6}"
    assert scan.location == "Frankfurt, DE" and scan.contact == "noc@example.org" and scan.host == "scanner-1"
    v = w47[w47.stage == "verify"].iloc[0]
    assert v.tool == "verify" and v.geoip == "geoip-city 2026-11-17, geoip-asn 2026-11-16" and v.zmap == ""
    m = w47[w47.stage == "measure"].iloc[0]
    assert m.key == "2026-11-22T04Z" and m.tool == "measure" and m.records == 1
    legacy = df[df.vantage_id == "old"].iloc[0]
    assert legacy.records == 0 and legacy.tool == "" and legacy.revision == ""


def test_provenance_on_synthetic_data_has_every_run(synth_db):
    conn = load.connect(synth_db)
    df = load.provenance(conn)
    n = {s: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
         for s, t in (("scan", "scans"), ("verify", "verification_runs"), ("measure", "campaigns"))}
    conn.close()
    for stage, count in n.items():
        assert (df.stage == stage).sum() == count
