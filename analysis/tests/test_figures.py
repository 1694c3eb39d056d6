"""Every figure states its population, read back from the CSV it was drawn from; the
tables have one header style with units in README.csv; figures that would mislead on
little data (one week, one vantage point's coordinates missing, fewer rows than "top N",
protocols answered by different resolvers) say what they show."""

from __future__ import annotations

import csv
import os
import re
import xml.etree.ElementTree as ET

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from doqscan_analysis import plots, report, stats, synth, worldmap  # noqa: E402


def fmt_n(n) -> str:
    """A population as the figures state it."""
    return f"n={int(n):,}"


@pytest.fixture(scope="module")
def executed(synth_db, tmp_path_factory):
    return report.run(synth_db, str(tmp_path_factory.mktemp("reports")))


def svg_text(path) -> str:
    """Every text of an SVG figure (matplotlib keeps text as text: svg.fonttype none)."""
    root = ET.parse(path).getroot()
    return "\n".join(t for e in root.iter() for t in (e.text, e.tail) if t and t.strip())


def fig_text(fig) -> str:
    """Every text a matplotlib figure draws, as its SVG holds it."""
    import io
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    matplotlib.pyplot.close(fig)
    root = ET.fromstring(buf.getvalue())
    return "\n".join(t for e in root.iter() for t in (e.text, e.tail) if t and t.strip())


# What each figure must state, computed from its CSV table(s) alone: a list of strings
# that must all appear in the figure, or lists of alternatives (one must appear).
def _weekly_totals(t, value="resolvers"):
    return [fmt_n(n) for n in t.groupby("iso_week")[value].sum()]


def _quantile_rows(q, vp, phase, mode, metric, protocols=None):
    d = q[(q["vantage_id"] == vp) & (q["phase"] == phase) & (q["mode"] == mode) & (q["dox"])
          & (q["metric"] == metric) & (q["n"] > 0)]
    if protocols is not None:
        d = d[d["protocol"].isin(protocols)]
    # a protocol measured with several key shares: the figure shows one of them
    return [[f"{fmt_n(r.n)} of {int(r.resolvers):,} resolvers" for r in g.itertuples()]
            for _, g in d.groupby("protocol")]


NOT_DOUDP = ["dotcp", "dot", "doh", "doq", "doh3"]


def expected(figure: str, tables: dict[str, pd.DataFrame]) -> list:
    if figure in ("fig1_doq_quic_versions_per_week", "top_providers"):
        return _weekly_totals(tables[figure])
    if figure == "quic_libraries_per_week":
        return _weekly_totals(tables["quic_libraries"])
    if figure == "port_shares":
        t = tables["port_shares"]
        return [fmt_n(n) for n in t.groupby("iso_week")["total"].max()]
    if figure == "scan_advertised_versions":
        t = tables[figure]
        return [f"of {int(t[t['iso_week'] == t['iso_week'].max()]['vn_addresses'].iloc[0])} that sent"]
    if figure == "stack_fingerprints":
        t = tables[figure]
        return [f"(of {int(t[t['iso_week'] == t['iso_week'].max()]['addresses'].sum())})"]
    if figure == "retention":
        out = []
        for kind, name in (("DoQ", "retention_doq"), ("DoUDP", "retention_doudp")):
            t = tables[name]
            out.append(f"{kind} ({fmt_n(t['total'].iloc[0])} in {t['iso_week'].iloc[0]})" if len(t) > 1
                       else "no data: retention needs two weeks")
        return out
    if figure == "countries_ases":
        return [f"(of {int(tables[n]['resolvers'].sum())})" for n in ("geo_countries", "geo_ases")]
    if figure == "fig2_world_map":
        return [fmt_n(tables[figure]["resolvers"].sum())]
    q = tables.get("response_times_quantiles")
    if m := re.fullmatch(r"fig3a_resolve_rtt_(.+)", figure):
        vp = m.group(1)
        return (_quantile_rows(q, vp, "measured", "fresh", "resolve_ns")
                + _quantile_rows(q, vp, "measured", "fresh", "rtt_ns", NOT_DOUDP))
    if m := re.fullmatch(r"fig3b_handshake_ratio_(.+)", figure):
        vp = m.group(1)
        return (_quantile_rows(q, vp, "measured", "fresh", "handshake_ns", NOT_DOUDP)
                + _quantile_rows(q, vp, "measured", "fresh", "ratio", NOT_DOUDP)
                + _quantile_rows(q, vp, "warmup", "fresh", "handshake_ns", ["doq"]))
    if m := re.fullmatch(r"modes_(handshake|resolve)_(.+)", figure):
        metric, vp = m.group(1) + "_ns", m.group(2)
        d = q[(q["vantage_id"] == vp) & (q["phase"] == "measured") & q["dox"] & (q["metric"] == metric) & (q["n"] > 0)]
        return [[f"{fmt_n(r.n)} of {int(r.resolvers):,} resolvers" for r in g.itertuples()]
                for _, g in d.groupby(["protocol", "mode"])]
    if figure == "vantage_comparison":
        t = tables[figure]
        return ([fmt_n(n) for n in t.groupby("protocol")["common_resolvers"].max()]
                + [fmt_n(n) for n in t[t["protocol"] != "doudp"].groupby("protocol")["rtt_resolvers"].max()])
    if m := re.fullmatch(r"doq_causes_(measured|warm-up)_by_(.+)", figure):
        c = tables["doq_causes"]
        d = c[c["phase"] == "warmup"] if m.group(1) == "warm-up" else c[(c["phase"] == "measured") & (c["mode"] == "fresh")]
        by = {"vn_version_list": "implementation", "key_share": "key_share", "vantage_point": "vantage_id"}[m.group(2)]
        return [f"({fmt_n(n)})" for n in d.groupby(by)["handshakes"].sum()]
    if figure == "amplification_stalls":
        t = tables["amplification_cells"]
        return [f"({fmt_n(n)} handshakes)" for n in t.groupby(["key_share", "initial_size"])["handshakes"].sum()]
    raise AssertionError(f"{figure}: no population check (add one, and its table to plots.FIGURE_TABLES)")


def check_populations(folder: str) -> list[str]:
    figs = os.path.join(folder, "figures")
    checked = []
    for f in sorted(os.listdir(figs)):
        if not f.endswith(".svg"):
            continue
        name = f[:-4]
        names = plots.figure_tables(name)
        assert names, f"{name}: drawn from no CSV table (plots.FIGURE_TABLES)"
        tables = {}
        for t in names:
            p = os.path.join(figs, t + ".csv")
            assert os.path.exists(p), f"{name}: its table {t}.csv was not written"
            tables[t] = pd.read_csv(p) if os.path.getsize(p) > 1 else pd.DataFrame()
        text = svg_text(os.path.join(figs, f))
        for want in expected(name, tables):
            alts = want if isinstance(want, list) else [want]
            assert any(a in text for a in alts), f"{name}: states none of {alts}\n--- its text:\n{text}"
        checked.append(name)
    return checked


def test_every_figure_states_its_population_from_its_csv(executed, spec):
    checked = check_populations(executed["folder"])
    # the synthetic report draws every figure of adoption and response_times
    for want in ("fig1_doq_quic_versions_per_week", "port_shares", "retention", "top_providers", "fig2_world_map",
                 "vantage_comparison", "doq_causes_measured_by_vn_version_list"):
        assert want in checked
    for v in spec.vantages:
        assert {f"fig3a_resolve_rtt_{v}", f"fig3b_handshake_ratio_{v}"} <= set(checked)


def test_tables_one_header_style_units_in_readme(executed):
    """Every CSV header is lower-case words joined by '_' (a vantage point after a '.'),
    README.csv lists every column of every table with the unit its suffix names, and
    index.html links it and each figure's tables."""
    figs = os.path.join(executed["folder"], "figures")
    with open(os.path.join(figs, "README.csv"), newline="") as f:
        readme = list(csv.DictReader(f))
    listed = {(r["file"], r["column"]): r for r in readme}
    tables = [f for f in os.listdir(figs) if f.endswith(".csv") and f != "README.csv"]
    assert tables
    for t in tables:
        with open(os.path.join(figs, t), newline="") as f:
            header = next(csv.reader(f), [])
        for col in header:
            assert re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*(\.[^,]+)?", col), f"{t}: header {col!r}"
            assert (t, col) in listed, f"{t}: {col} not in README.csv"
            assert listed[(t, col)]["unit"] in (plots.unit_of(col), "")
    assert listed[("vantage_comparison.csv", "resolve_median_ms")]["unit"] == "milliseconds"
    assert "vantage_comparison.png" in listed[("vantage_comparison.csv", "resolve_median_ms")]["figures"]
    index = open(os.path.join(executed["folder"], "index.html")).read()
    assert "href='figures/README.csv'" in index
    assert re.search(r"vantage_comparison\.png</a> \(numbers: <a href='figures/vantage_comparison\.csv'>", index)


def test_readme_units_only_for_numbers(tmp_path):
    """A column of labels whose name ends in a unit's word (key_share: x25519) has no unit
    in README.csv; a column of numbers has its suffix's."""
    figs = tmp_path / "figures"
    figs.mkdir()
    (figs / "cells.csv").write_text("key_share,stall_share,resolve_median_ms\nx25519,0.5,12.5\nx25519mlkem768,,13\n")
    with open(report.write_readme_csv(str(figs)), newline="") as f:
        units = {r["column"]: r["unit"] for r in csv.DictReader(f)}
    assert units == {"key_share": "", "stall_share": "fraction (0..1)", "resolve_median_ms": "milliseconds"}


def test_side_by_side_keeps_its_protocols(executed):
    """side_by_side.csv has its rows' protocol (the frame's index) and a column per metric
    and vantage point."""
    t = pd.read_csv(os.path.join(executed["folder"], "figures", "side_by_side.csv"))
    assert t.columns[0] == "protocol" and "DoQ" in set(t["protocol"])
    assert any(c.startswith("resolve_median_ms.") for c in t.columns)


@pytest.mark.parametrize("name,want", [
    ("resolve median [ms]", "resolve_median_ms"), ("handshake_median_ms", "handshake_median_ms"),
    ("idle alive s (median)", "idle_alive_median_s"), ("cold ms (median)", "cold_median_ms"),
    (("ratio median", "synth-a"), "ratio_median.synth-a"), (("protocol", ""), "protocol"), ("iso_week", "iso_week"),
    ("loss 0.5% ms", "loss_0_5pct_ms"), ("loss 20% qps", "loss_20pct_qps"), ("fresh p50 ms", "fresh_p50_ms"),
    ("0rtt success", "0rtt_success")])
def test_csv_header(name, want):
    assert plots.csv_header(name) == want


def test_sweep_and_reuse_csvs_in_the_one_header_style(tmp_path):
    """The loss sweep's tables (a column per loss level) and the connection-reuse table
    are written in the one header style, each column's last word its values' unit."""
    from doqscan_analysis import bench
    t = pd.DataFrame({"server": ["s"], "target": ["doq://x"], "protocol": ["doq"], "policy": ["persistent"],
                      "0%": [1.0], "0.5%": [2.0]})
    for metric, unit in (("qps", "queries per second"), ("latency_mean_ms", "milliseconds"),
                         ("success_rate", "fraction (0..1)")):
        path = plots.save_table(bench.sweep_csv(t, metric), str(tmp_path), f"loss_sweep_{metric}")
        cols = list(pd.read_csv(path).columns)
        assert cols[:4] == list(bench.KEY_COLUMNS)
        assert all(re.fullmatch(r"loss_0(_5)?pct_[a-z]+", c) for c in cols[4:]), cols
        assert {plots.unit_of(c) for c in cols[4:]} == {unit}, cols
    reuse = pd.DataFrame({"server": ["s"], "target": ["doq://x"], "protocol": ["doq"], "fresh mean ms": [3.0],
                          "fresh p50 ms": [2.0], "fresh success": [1.0]})
    cols = list(pd.read_csv(plots.save_table(reuse, str(tmp_path), "connection_reuse")).columns)
    assert cols == ["server", "target", "protocol", "fresh_mean_ms", "fresh_p50_ms", "fresh_success"]
    assert [plots.unit_of(c) for c in cols[3:]] == ["milliseconds", "milliseconds", "fraction (0..1)"]


def test_vantage_figure_says_n_per_protocol():
    """A protocol answered from every vantage point by fewer resolvers than another: its
    bars say their own n; the title claims no single common set."""
    rows = []
    for vp in ("a", "b"):
        for i in range(5):
            rows.append({"vantage_id": vp, "protocol": "doq", "address": f"10.0.0.{i}",
                         "resolve_ns": 1e7 * (i + 1), "handshake_ns": 2e7, "rtt_ns": 1e7})
        for i in range(2):
            rows.append({"vantage_id": vp, "protocol": "doh3", "address": f"10.0.0.{i}",
                         "resolve_ns": 1e7, "handshake_ns": 2e7, "rtt_ns": 1e7})
    per = pd.DataFrame(rows)
    table = stats.vantage_comparison(per)
    text = fig_text(plots.vantage_figure(per, table))
    assert "n=5" in text and "n=2" in text
    assert "same 5 resolvers" not in text


def test_top_providers_legend_counts_what_it_shows():
    seven = pd.DataFrame({"iso_week": ["2026-W01"] * 7, "subject_cn": [f"cn{i}" for i in range(7)],
                          "resolvers": range(1, 8)})
    assert stats.top_note(seven, "subject_cn") == "all 7"
    folded = pd.concat([seven, pd.DataFrame({"iso_week": ["2026-W01"], "subject_cn": ["other"], "resolvers": [3]})])
    assert stats.top_note(folded, "subject_cn") == "top 7; the rest as other"


def test_barh_title_says_how_many_rows():
    df = pd.DataFrame({"country": ["DE", "US", "JP"], "resolvers": [3, 2, 1]})
    assert "Countries (all 3)" in fig_text(plots.barh_counts(df, "country", title="Countries", top=15))
    assert "Countries (top 2 of 3)" in fig_text(plots.barh_counts(df, "country", title="Countries", top=2))


def test_one_week_port_shares_are_bars_and_retention_says_why():
    """One week: the port shares are bars with their counts (not dots on a line), and the
    retention panel says it needs a second week."""
    shares = pd.DataFrame({"iso_week": ["2026-W48"] * 2, "port": [784, 853], "resolvers": [30, 20],
                           "total": [40, 40], "share": [0.75, 0.5]})
    fig = plots.port_share_lines(shares)
    assert len(fig.axes[0].patches) == 2 and not fig.axes[0].lines
    text = fig_text(fig)
    assert "75.0% (30)" in text and "n=40" in text
    members = pd.DataFrame({"iso_week": ["2026-W48"], "week_index": [1], "total": [40], "kept_from_previous": [0],
                            "kept_from_first": [40]})
    text = fig_text(plots.retention_lines({"DoQ": stats.churn(members)}))
    assert "no data: retention needs two weeks or more; the data has one (2026-W48)" in text


def test_map_marks_the_vantage_point():
    """The vantage point's marker: from its coordinates, else from "LAT,LON" in its
    location text; a vantage point without either is named under the map."""
    pts = pd.DataFrame({"latitude": [50.0], "longitude": [8.0], "resolvers": [3]})
    vp = pd.DataFrame({"vantage_id": ["fra", "sim"], "description": ["", ""], "country": [None, None],
                       "latitude": [None, None], "longitude": [None, None],
                       "location": ["Frankfurt 50.11,8.68", "simulated internet (198.18.0.2)"]})
    v = worldmap.vantage_coordinates(vp)
    assert (v.loc[0, "latitude"], v.loc[0, "longitude"]) == (50.11, 8.68)
    assert pd.isna(v.loc[1, "latitude"])
    fig = worldmap.resolver_map(pts, None, vp, title="t")
    markers = [c for c in fig.axes[0].collections if c.get_label().startswith("vantage point")]
    assert len(markers) == 1 and len(markers[0].get_offsets()) == 1
    text = fig_text(fig)
    assert "vantage point: fra" in text
    assert "no marker for vantage point sim: no coordinates recorded" in text


def test_report_on_one_resolver_states_populations(fresh_db, tmp_path):
    """One resolver, one week: every figure still states its population from its CSV,
    the one-week figures say why they show little."""
    import psycopg
    one = synth.default_spec(hours=1, targets=1, dox_pct=0, doudp_counts=[1], doudp_shift=0,
                             pairs=[synth.Pair("doq", 0x00000001, [1], shift=0, cn="one.example",
                                               vn_versions=[1, synth.GREASE])])
    url = fresh_db()
    with psycopg.connect(url, autocommit=True) as c:
        synth.generate(c, one)
    s = report.run(url, str(tmp_path), notebooks=["adoption", "response_times"])
    assert not {n: v["error"] for n, v in s["notebooks"].items() if v["error"]}
    check_populations(s["folder"])
    assert "no data: retention needs two weeks" in svg_text(os.path.join(s["folder"], "figures", "retention.svg"))
