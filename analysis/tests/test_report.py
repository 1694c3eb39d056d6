"""Both notebooks executed headless (papermill) by the report module against the
synthetic database; the report must hold the HTML, the study's figures as PNG and SVG,
and the numbers derived from the spec (version-pair totals, port shares, retention,
DoX count, DoQ round-trip classes) in the executed notebooks."""

import ast
import json
import os

import nbformat
import pytest

from doqscan_analysis import report, synth

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def executed(synth_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    s = report.run(synth_db, str(out))
    return s


def _text(path):
    nb = nbformat.read(path, as_version=4)
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            if "text" in o:
                parts.append(o["text"])
            for k in ("text/plain", "text/markdown", "text/html"):
                if k in o.get("data", {}):
                    parts.append(o["data"][k])
    return "\n".join(parts)


def test_notebooks_run_clean(executed):
    errors = {n: v["error"] for n, v in executed["notebooks"].items() if v["error"]}
    assert not errors
    for n in report.NOTEBOOKS:
        assert os.path.getsize(os.path.join(executed["folder"], f"{n}.html")) > 10_000
    assert os.path.exists(os.path.join(executed["folder"], "index.html"))


@pytest.mark.parametrize("name", report.NOTEBOOKS)
def test_source_notebooks_valid(name):
    """Each source notebook is valid nbformat 4.5 as written: every cell has its id
    (nbformat warns on every read otherwise, and will refuse)."""
    with open(os.path.join(report.REPO, "notebooks", f"{name}.ipynb"), encoding="utf-8") as f:
        raw = json.load(f)  # as written: nbformat's reader adds missing ids itself
    missing = [i for i, c in enumerate(raw["cells"]) if "id" not in c]
    assert not missing, f"{name}.ipynb: cells {missing} have no id"
    nbformat.validate(nbformat.from_dict(raw))
    ids = [c["id"] for c in raw["cells"]]
    assert len(set(ids)) == len(ids), f"{name}.ipynb: duplicate cell ids"


@pytest.mark.parametrize("name", report.NOTEBOOKS)
def test_notebooks_declare_every_parameter(name):
    """Each notebook's parameters cell assigns every parameter the report passes, so
    papermill injects none it does not know (it warns "Passed unknown parameter")."""
    nb = nbformat.read(os.path.join(report.REPO, "notebooks", f"{name}.ipynb"), as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{name}.ipynb: {len(cells)} parameters cells"
    declared = {t.id for node in ast.walk(ast.parse(cells[0].source)) if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    missing = set(report.parameters("", "")) - declared
    assert not missing, f"{name}.ipynb: parameters cell lacks {sorted(missing)}"


def test_figures_written(executed, spec):
    figs = set(executed["figures"])
    want = ["fig1_doq_quic_versions_per_week", "fig2_world_map", "port_shares", "retention", "top_providers",
            "stack_fingerprints"]
    want += [f"fig3a_resolve_rtt_{v}" for v in spec.vantages] + [f"fig3b_handshake_ratio_{v}" for v in spec.vantages]
    for name in want:
        assert f"{name}.png" in figs and f"{name}.svg" in figs, name
        with open(os.path.join(executed["folder"], "figures", f"{name}.png"), "rb") as f:
            assert f.read(8) == PNG_MAGIC


def test_numbers_in_notebooks(executed, spec):
    truth = synth.expected(spec)
    adoption = _text(os.path.join(executed["folder"], "adoption.ipynb"))
    # retention sentence and the Fig. 1 table's weekly totals
    assert f"{truth['doq_retention']:.1%} of the {truth['totals'][truth['weeks'][0]]} resolvers" in adoption
    assert f"{truth['doudp_retention']:.1%} of the" in adoption
    last = truth["weeks"][-1]
    for port in (784, 853, 8853):
        share = truth["port_resolvers"].get((last, port), 0) / truth["totals"][last]
        assert f"{share:.1%}" in adoption
    rt = _text(os.path.join(executed["folder"], "response_times.ipynb"))
    for v in spec.vantages:
        n = sum(c for (vp, k), c in truth["doq_round_trips"].items() if vp == v)
        for k in (1, 2, 3, 4):
            share = truth["doq_round_trips"].get((v, k), 0) / n
            assert f"{share:.1%}" in rt, (v, k, share)


def test_vantage_comparison_written(executed, spec):
    """response_times.ipynb compares the vantage points and writes the numbers beside
    its figure: one row per vantage point and protocol, DoQ answered by every target."""
    import pandas as pd

    truth = synth.expected(spec)
    figs = set(executed["figures"])
    assert {"vantage_comparison.png", "vantage_comparison.svg", "vantage_comparison.csv"} <= figs
    t = pd.read_csv(os.path.join(executed["folder"], "figures", "vantage_comparison.csv"))
    assert sorted(t["vantage_id"].unique()) == sorted(spec.vantages)
    doq = t[t["protocol"] == "doq"].set_index("vantage_id")
    for v in spec.vantages:
        assert doq.loc[v, "resolvers"] == truth["targets"]
        assert doq.loc[v, "common_resolvers"] == truth["targets"]
    assert (t["reference"] == sorted(spec.vantages)[0]).all()


def test_benchmarks_without_runs(executed):
    """The synthetic database holds no dnsbench run: the benchmarks notebook says so and
    writes neither tables nor the sweep figure."""
    text = _text(os.path.join(executed["folder"], "benchmarks.ipynb"))
    assert "No benchmark runs are stored" in text
    assert "No loss sweep is stored" in text and "No policy comparison is stored" in text
    assert not [f for f in executed["figures"] if f.startswith(("loss_sweep", "connection_reuse"))]


def test_kernel_channels_are_unix_sockets(tmp_path):
    """Each notebook's kernel talks over Unix sockets in a directory of its own, so kernels
    started at once in several processes share no TCP port. The notebook reads the
    connection file its kernel was started with."""
    folder = tmp_path / "nb"
    folder.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("marker = ''")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "import json, ipykernel.connect\n"
        "info = json.load(open(ipykernel.connect.get_connection_file()))\n"
        "print(marker, info['transport'], info['ip'])")]
    nbformat.write(nb, folder / "channels.ipynb")
    out = tmp_path / "out"
    out.mkdir()
    secs, error = report._execute("channels", str(out), {"marker": "channels:"}, 120, folder=str(folder))
    assert error is None
    line = next(ln for ln in _text(out / "channels.ipynb").splitlines() if ln.startswith("channels:"))
    _, transport, ip = line.split()
    assert transport == "ipc"
    assert os.path.basename(os.path.dirname(ip)).startswith("doqscan-kernel-")
    assert not os.path.exists(os.path.dirname(ip)), "the socket directory outlived the notebook"


def _silent_or_empty_cells(folder):
    """Code cells of the executed notebooks that show nothing, or show an empty table
    ("Empty DataFrame", an HTML table without a cell, "nan%") or a bare file path,
    instead of saying "no data: why"."""
    bad = []
    for name in report.NOTEBOOKS:
        nb = nbformat.read(os.path.join(folder, f"{name}.ipynb"), as_version=4)
        for i, c in enumerate(nb.cells):
            tags = c.metadata.get("tags", [])
            if c.cell_type != "code" or "parameters" in tags or "injected-parameters" in tags:
                continue
            outs = c.get("outputs", [])
            if not outs:
                bad.append((name, i, "no output", c.source[:80]))
            for o in outs:
                texts = [o.get("text", "")] + [o.get("data", {}).get(k, "") for k in ("text/plain", "text/markdown")]
                html = o.get("data", {}).get("text/html", "")
                for t in texts:
                    if "Empty DataFrame" in t or "nan%" in t or t.strip().endswith(".csv'"):
                        bad.append((name, i, t[:80], c.source[:80]))
                if "<table" in html and "<td" not in html:
                    bad.append((name, i, "a table without rows", c.source[:80]))
    return bad


def test_report_on_an_empty_database(fresh_db, tmp_path):
    """A database with the schema and no row: every notebook runs to its end (a cell
    without data says so instead of raising), the report has no error, and every cell
    shows something: a figure saying "no data: ..." or a sentence saying why it has
    nothing, never an empty table."""
    s = report.run(fresh_db(), str(tmp_path))
    errors = {n: v["error"] for n, v in s["notebooks"].items() if v["error"]}
    assert not errors
    assert not _silent_or_empty_cells(s["folder"])
    assert "no data: no successful measurement in the selection" in _text(os.path.join(s["folder"], "response_times.ipynb"))
    assert report.main(["--db", fresh_db(), "--out", str(tmp_path), "--notebooks", "benchmarks"]) == report.EXIT_OK


def test_report_on_one_resolver(fresh_db, tmp_path):
    """One measured resolver that is no DoX resolver (the DoX set is empty): every
    notebook runs to its end, and the connection-modes cell says it has no data."""
    one = synth.default_spec(hours=1, targets=1, dox_pct=0)
    url = fresh_db()
    import psycopg
    with psycopg.connect(url, autocommit=True) as c:
        synth.generate(c, one)
    s = report.run(url, str(tmp_path))
    errors = {n: v["error"] for n, v in s["notebooks"].items() if v["error"]}
    assert not errors
    assert "no data: no DoX resolver" in _text(os.path.join(s["folder"], "response_times.ipynb"))
    assert not _silent_or_empty_cells(s["folder"])


def test_tables_published(executed):
    """Every table the figures draw is written as CSV readable by all (0644 under the
    usual umask 022, like the figures) and linked from index.html."""
    folder = os.path.join(executed["folder"], "figures")
    csvs = [f for f in executed["figures"] if f.endswith(".csv")]
    assert csvs
    index = open(os.path.join(executed["folder"], "index.html")).read()
    umask = os.umask(0)
    os.umask(umask)
    for f in csvs:
        mode = os.stat(os.path.join(folder, f)).st_mode & 0o777
        assert mode == 0o666 & ~umask, f"{f}: mode {mode:o}"
        assert f"href='figures/{f}'" in index, f


def test_relative_out_is_made_absolute(synth_db, tmp_path, monkeypatch):
    """A relative --out names a folder under the caller's working directory: the
    notebooks (run in notebooks/) get it as an absolute output_dir."""
    monkeypatch.chdir(tmp_path)
    s = report.run(synth_db, "rel-reports", notebooks=["benchmarks"], parallel=False)
    assert os.path.isabs(s["folder"]) and s["folder"].startswith(str(tmp_path))
    nb = nbformat.read(os.path.join(s["folder"], "benchmarks.ipynb"), as_version=4)
    params = next(c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert f"output_dir = {s['folder']!r}" in params.source or f'output_dir = "{s["folder"]}"' in params.source
