"""dnsbench runs in the report: bench_runs rows (as dnsbench --store writes them) read by
load.bench_runs and built into the loss-sweep tables, the connection-reuse table and the
sweep figure by bench and plots. The rows are written here with known numbers; every
table cell must be the number of its run, in the documented row and column order."""

import datetime as dt
import json
import math

import pandas as pd
import psycopg
import pytest

from doqscan_analysis import bench, load, plots

T0 = dt.datetime(2026, 11, 23, 10, 0, tzinfo=dt.UTC)
PROXY, CORE = "198.19.3.7", "198.19.3.1"
PORTS = {"doudp": 53, "dot": 853, "doq": 853}
LEVELS = [0, 0.01, 0.05, 0.2]
PEERS = pd.DataFrame({"address": [CORE, PROXY], "peer": ["coredns", "dnsproxy"],
                      "class": ["peer-coredns", "peer-dnsproxy"]})


def _success(proto: str, loss: float) -> float:
    """The inputs' success rates: UDP loses a query when either packet is lost, the
    retransmitting transports almost never."""
    return (1 - loss) ** 2 if proto == "doudp" else 1 - loss ** 3


def _latency(proto: str, loss: float, rtt: float) -> float:
    return rtt if proto == "doudp" else rtt * (1 + 3 * loss)


class Runs:
    """Writes bench_runs rows (and a bench_samples timeline) the way dnsbench.Save does."""

    def __init__(self, conn):
        self.conn = conn
        self.n = 0

    def add(self, proto, addr, *, label="", policy="persistent", loss=None, qps=100.0, success=1.0,
            mean=20.0, total_mean=None, total_p50=None, sent=1000, started=None, seconds=3):
        self.n += 1
        target = f"{proto}://{addr}:{PORTS[proto]}"
        answered = round(sent * success)
        report = {"run_key": f"k{self.n}", "target": target, "protocol": proto, "address": f"{addr}:{PORTS[proto]}",
                  "policy": policy, "label": label,
                  "total": {"mean_ms": total_mean or mean, "p50_ms": total_p50 or mean}}
        if loss is not None:
            report["path_loss"] = loss
        started = started or T0 + dt.timedelta(seconds=self.n)
        bid = self.conn.execute("""
            INSERT INTO bench_runs (run_key, started_at, label, protocol, address, port, policy, load, workers,
                   elapsed_s, sent, answered, qps, success_rate, latency_mean_ms, latency_p50_ms, latency_p99_ms,
                   total_mean_ms, report)
            VALUES (%s, %s, %s, %s, %s, %s, %s, 'max', 16, 3, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            RETURNING bench_id""",
            (report["run_key"], started, label, proto, addr, PORTS[proto], policy, sent, answered, qps,
             answered / sent, mean if answered else 0.0, mean if answered else 0.0, mean if answered else 0.0,
             (total_mean or mean) if answered else 0.0, json.dumps(report))).fetchone()[0]
        for s in range(seconds):
            self.conn.execute("INSERT INTO bench_samples (bench_id, second, sent, answered, failed, started_at) "
                              "VALUES (%s, %s, 10, 9, 1, %s)", (bid, s, started))
        return target

    def sweep(self, label, servers=((PROXY, 20.0), (CORE, 150.0)), levels=LEVELS, start=T0):
        """A sweep as dnsbench --loss-sweep stores it: level by level, every target (the
        protocols in an order of their own: the tables list them in the report's)."""
        for i, loss in enumerate(levels):
            for addr, rtt in servers:
                for proto in ("doq", "doudp", "dot"):
                    self.add(proto, addr, label=f"{label} loss={bench.loss_label(loss)}".strip(), loss=loss,
                             qps=1000 * _success(proto, loss) / rtt, success=_success(proto, loss),
                             mean=_latency(proto, loss, rtt), started=start + dt.timedelta(minutes=i))


@pytest.fixture()
def db(fresh_db):
    with psycopg.connect(fresh_db(), autocommit=True) as c:
        yield c


def test_empty_database(db):
    runs = load.bench_runs(db)
    assert runs.empty and list(runs.columns) == load.BENCH_COLUMNS
    assert bench.series(runs).empty
    tables = bench.sweep_tables(runs, peers=PEERS)
    assert list(tables) == list(bench.SWEEP_METRICS) and all(t.empty for t in tables.values())
    assert bench.reuse_table(runs).empty
    fig = plots.loss_sweep_figure(bench.sweep_frame(runs))
    assert "no loss sweep stored" in [t.get_text() for t in fig.axes[0].texts][0]


def test_database_without_bench_tables(db):
    db.execute("DROP TABLE bench_samples; DROP TABLE bench_runs")
    assert list(load.bench_runs(db).columns) == load.BENCH_COLUMNS


def test_loader_reads_what_dnsbench_stores(db):
    r = Runs(db)
    r.add("doq", PROXY, label="lab loss=5%", loss=0.05, qps=321.5, success=0.75, mean=33.0, total_p50=34.5)
    r.add("doudp", CORE, label="nothing answered loss=20%", loss=0.2, success=0.0, mean=0.0, seconds=0)
    r.add("dot", PROXY, label="plain", mean=21.0, total_mean=61.0, total_p50=60.0)
    runs = load.bench_runs(db)
    assert list(runs.columns) == load.BENCH_COLUMNS
    a, b, c = (runs.iloc[i] for i in range(3))
    assert (a.series, a.target, a.path_loss, a.qps, a.success_rate, a.latency_mean_ms, a.total_p50_ms, a.seconds) == \
        ("lab", f"doq://{PROXY}:853", 0.05, 321.5, 0.75, 33.0, 34.5, 3)
    # no answer: no latency (dnsbench stores 0), the run still counts
    assert b.series == "nothing answered" and b.success_rate == 0 and math.isnan(b.latency_mean_ms)
    assert b.seconds == 0 and math.isnan(b.total_p50_ms)
    assert c.series == "plain" and math.isnan(c.path_loss) and (c.total_mean_ms, c.total_p50_ms) == (61.0, 60.0)
    # weeks select by the start's ISO week
    assert len(load.bench_runs(db, weeks=["2026-W48"])) == 3 and load.bench_runs(db, weeks=["2026-W47"]).empty


def test_sweep_tables(db):
    r = Runs(db)
    r.sweep("sweep A")
    runs = load.bench_runs(db)
    tables = bench.sweep_tables(runs, peers=PEERS)
    levels = ["0%", "1%", "5%", "20%"]
    for metric, t in tables.items():
        assert list(t.columns) == bench.KEY_COLUMNS + levels, metric
        # servers in the order the sweep ran them, protocols in the report's order
        assert list(zip(t["server"], t["protocol"])) == [
            (f"dnsproxy {PROXY}", "doudp"), (f"dnsproxy {PROXY}", "dot"), (f"dnsproxy {PROXY}", "doq"),
            (f"coredns {CORE}", "doudp"), (f"coredns {CORE}", "dot"), (f"coredns {CORE}", "doq")], metric
        assert set(t["policy"]) == {"persistent"}
    succ = tables["success_rate"].set_index("target")
    lat = tables["latency_mean_ms"].set_index("target")
    for addr, rtt in ((PROXY, 20.0), (CORE, 150.0)):
        for proto in ("doudp", "dot", "doq"):
            tgt = f"{proto}://{addr}:{PORTS[proto]}"
            for loss, col in zip(LEVELS, levels):
                assert succ.loc[tgt, col] == pytest.approx(round(1000 * _success(proto, loss)) / 1000)
                assert lat.loc[tgt, col] == pytest.approx(_latency(proto, loss, rtt))
                assert tables["qps"].set_index("target").loc[tgt, col] == pytest.approx(
                    1000 * _success(proto, loss) / rtt)
    md = bench.markdown(tables["success_rate"], "success_rate")
    assert md.splitlines()[0] == "| server | target | protocol | policy | 0% | 1% | 5% | 20% |"
    assert f"| dnsproxy {PROXY} | doudp://{PROXY}:53 | doudp | persistent | 100.00% | 98.00% | 90.20% | 64.00% |" in md


def test_newest_sweep_and_newest_run_per_cell(db):
    r = Runs(db)
    r.sweep("old", servers=((CORE, 150.0),), levels=[0, 0.1])
    r.sweep("new", servers=((PROXY, 20.0),), levels=[0, 0.05], start=T0 + dt.timedelta(hours=1))
    # a repeated cell of the new sweep: the later run counts
    again = r.add("doq", PROXY, label="new loss=5%", loss=0.05, success=0.5, mean=99.0,
                  started=T0 + dt.timedelta(hours=2))
    runs = load.bench_runs(db)
    s = bench.series(runs)
    assert list(s["series"]) == ["old", "new"] and set(s["kind"]) == {"loss sweep"}
    assert list(s["levels"]) == [2, 2] and list(s["runs"]) == [6, 7]
    succ = bench.sweep_tables(runs, peers=PEERS)["success_rate"]
    assert list(succ.columns[4:]) == ["0%", "5%"] and set(succ["server"]) == {f"dnsproxy {PROXY}"}
    assert succ.set_index("target").loc[again, "5%"] == 0.5
    old = bench.sweep_tables(runs, "old")["success_rate"]
    assert list(old.columns[4:]) == ["0%", "10%"] and set(old["server"]) == {CORE}  # no peer names given
    assert bench.sweep_tables(runs, "no such sweep")["qps"].empty


def test_missing_level_is_empty_cell(db):
    r = Runs(db)
    r.add("doudp", PROXY, label="gap loss=0%", loss=0.0)
    r.add("doudp", PROXY, label="gap loss=10%", loss=0.1, success=0.8)
    r.add("doq", PROXY, label="gap loss=10%", loss=0.1)
    t = bench.sweep_tables(load.bench_runs(db))["qps"].set_index("protocol")
    assert math.isnan(t.loc["doq", "0%"]) and t.loc["doq", "10%"] == 100.0
    assert "| - |" in bench.markdown(t.reset_index(), "qps")


def test_reuse_table(db):
    r = Runs(db)
    r.sweep("sweep X", levels=[0])  # a sweep is not a comparison
    for proto, fresh, zero in (("dot", 61.0, 62.0), ("doq", 42.0, 22.0)):
        for policy, p50 in (("0rtt", zero), ("fresh", fresh), ("persistent", 20.5)):
            r.add(proto, PROXY, label="sweep X", policy=policy, total_mean=p50 + 1, total_p50=p50,
                  success=0.99 if policy == "fresh" else 1.0)
    r.add("doudp", PROXY, label="single", policy="persistent")  # one policy per target: not a comparison
    runs = load.bench_runs(db)
    kinds = bench.series(runs).set_index(["series", "kind"])
    assert {("sweep X", "loss sweep"), ("sweep X", "policy comparison"), ("single", "runs")} == set(kinds.index)
    t = bench.reuse_table(runs, peers=PEERS)
    assert list(t.columns) == bench.REUSE_KEYS + [
        f"{p} {m}" for p in ("fresh", "persistent", "0rtt") for m in ("mean ms", "p50 ms", "success")]
    assert list(t["protocol"]) == ["dot", "doq"] and set(t["server"]) == {f"dnsproxy {PROXY}"}
    doq = t.set_index("protocol").loc["doq"]
    assert (doq["fresh p50 ms"], doq["persistent p50 ms"], doq["0rtt p50 ms"]) == (42.0, 20.5, 22.0)
    assert (doq["fresh mean ms"], doq["fresh success"], doq["0rtt success"]) == (43.0, 0.99, 1.0)
    md = bench.markdown(t)
    assert f"| dnsproxy {PROXY} | dot://{PROXY}:853 | dot | 62.00 | 61.00 | 99.00% |" in md
    assert bench.reuse_table(runs, "single").empty


def test_sweep_figure_panels(db):
    r = Runs(db)
    r.sweep("fig")
    frame = bench.sweep_frame(load.bench_runs(db), peers=PEERS)
    fig = plots.loss_sweep_figure(frame)
    top = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in top] == [f"dnsproxy {PROXY}", f"coredns {CORE}"]
    assert len(fig.axes) == 4
    for ax in fig.axes:
        assert len(ax.lines) == 3  # DoUDP, DoT, DoQ
    udp = next(line for line in fig.axes[0].lines if line.get_label() == "DoUDP")
    assert list(udp.get_xdata()) == pytest.approx([0, 1, 5, 20])
    assert list(udp.get_ydata()) == pytest.approx([round(1000 * (1 - x) ** 2) / 1000 for x in LEVELS])
