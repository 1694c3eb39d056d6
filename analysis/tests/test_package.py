"""The analysis package is an installed package: it imports nothing from test folders,
and the notebooks import it without editing sys.path."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import pathlib
import re
import subprocess

import doqscan_analysis

PKG = pathlib.Path(doqscan_analysis.__file__).resolve().parent
REPO = PKG.parents[1]


def test_installed_from_this_checkout():
    assert importlib.metadata.version("doqscan-analysis")
    assert PKG == REPO / "analysis" / "doqscan_analysis"


def test_package_reads_no_test_files():
    """No module of the package imports, loads or names a file under a tests folder
    (the population reader lives in the package: doqscan_analysis.population)."""
    for f in sorted(PKG.glob("*.py")):
        tree = ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + ([node.module] if getattr(node, "module", None) else [])
                assert not any("tests" in m.split(".") or m.startswith("test_") for m in mods), (f.name, mods)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value != "tests" and "tests/" not in node.value, \
                    f"{f.name}:{node.lineno} names a test folder: {node.value!r}"
            if isinstance(node, ast.Attribute):
                assert node.attr != "spec_from_file_location", f"{f.name}:{node.lineno} loads a module from a path"


def test_notebooks_do_not_edit_sys_path():
    for nb in sorted((REPO / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            src = "".join(cell["source"])
            assert "sys.path" not in src and "PYTHONPATH" not in src, nb.name


def test_report_does_not_edit_pythonpath():
    src = (PKG / "report.py").read_text()
    assert '"PYTHONPATH"' not in src, "the report finds the package installed, not through PYTHONPATH"
    assert os.environ.get("PYTHONPATH", "") == "" or str(PKG.parent) not in os.environ["PYTHONPATH"].split(os.pathsep)


def _tracked(*patterns: str) -> list[pathlib.Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *patterns], cwd=REPO, capture_output=True, check=True)
    return [REPO / p for p in out.stdout.decode().split("\0") if p]


def _test_modules() -> set[str]:
    """Module names of the files in test folders (conftest, expect, test_*, ...)."""
    return {p.stem for p in _tracked("*.py") if "tests" in p.relative_to(REPO).parts}


def _edits_sys_path(tree: ast.AST) -> list[int]:
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr == "path"
            and isinstance(n.value, ast.Name) and n.value.id == "sys"]


def test_non_test_code_imports_no_test_files():
    """The package, the benchmarks and other scripts import what they need from the
    installed package (doqscan_analysis.db: the test server and the schema), never a
    module of a test folder, and leave sys.path alone."""
    tests = _test_modules()
    assert {"conftest", "expect"} <= tests
    files = [p for p in _tracked("*.py") if "tests" not in p.relative_to(REPO).parts]
    assert REPO / "bench" / "report_bench.py" in files
    for f in files:
        tree = ast.parse(f.read_text(), str(f))
        rel = f.relative_to(REPO)
        assert not _edits_sys_path(tree), f"{rel}:{_edits_sys_path(tree)} edits sys.path"
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for m in mods:
                    assert m.split(".")[0] not in tests, f"{rel}:{node.lineno} imports the test module {m}"


def test_test_folders_do_not_edit_sys_path():
    """The test suites import doqscan_analysis as installed, and pytest puts a test
    folder's own helpers (expect.py) on the path: no conftest adds folders itself."""
    for f in _tracked("analysis/tests/*.py", "testbed/tests/*.py"):
        assert not _edits_sys_path(ast.parse(f.read_text(), str(f))), f"{f.relative_to(REPO)} edits sys.path"
    ini = (REPO / "pytest.ini").read_text()
    assert not re.search(r"^\s*pythonpath\s*=", ini, re.M), "pytest.ini puts a folder on sys.path"


def test_go_and_shell_run_the_installed_package():
    """Go code, ./dev and the scripts run the .venv's python, which has the package
    installed: none puts analysis/ on PYTHONPATH (a path entry would hide a .venv
    installed from another checkout, and let a .venv without the package pass)."""
    files = _tracked("*.go", "*.sh", "dev", "Dockerfile*", "deploy/Dockerfile*")
    assert REPO / "internal" / "testsupport" / "report.go" in files
    found = sorted(str(f.relative_to(REPO)) for f in files if "PYTHONPATH=" in f.read_text())
    assert found == []


# load's public names (the notebooks', report's, benchmarks' and tests' API).
LOAD_API = ['BENCH_COLUMNS', 'CAUSES', 'DEFAULT_POINTS', 'DOUDP_RCODES', 'Facts', 'GROUP_COLUMNS', 'METRICS',
            'PARALLEL', 'PEER_COLUMNS', 'PORT_PREFERENCE', 'PORT_UNKNOWN', 'PROVENANCE_COLUMNS', 'ROUND_TRIP_CLASSES',
            'VANTAGE_COLUMNS', 'VERIFIED', 'address_key', 'answering', 'bench_runs', 'certificate_counts', 'connect',
            'datasets', 'default_source', 'describe', 'doq_causes', 'features', 'geo_counts', 'geo_points',
            'has_measurement_facts', 'has_rtt_medians', 'measurement_facts', 'membership_by_week',
            'peer_response_times', 'per_resolver_medians', 'port_shares', 'ports_not_recorded', 'provenance',
            'ratio_classes', 'read_siblings', 'refresh_measurement_facts', 'refresh_rtt_medians', 'response_times',
            'response_times_sql', 'scan_versions', 'sources', 'stack_fingerprints', 'testbed_peers',
            'top_providers', 'vantage_points', 'verification_outcomes', 'verified_by_family', 'verified_by_pair',
            'weeks']


def test_load_is_split_by_subject():
    """load only re-exports: every function lives in a module of its subject (source,
    catalog, census, rtt, facts, measurements, benchruns), and load's public names are
    the same as before the split."""
    from doqscan_analysis import load
    assert sorted(load.__all__) == sorted(LOAD_API)
    tree = ast.parse((PKG / "load.py").read_text())
    defined = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign))
               and not (isinstance(n, ast.Assign) and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["__all__"])]
    assert defined == [], f"load.py defines {[getattr(n, 'name', None) or ast.unparse(n)[:40] for n in defined]}"
    for name in load.__all__:
        obj = getattr(load, name)
        if callable(obj):
            assert obj.__module__ != "doqscan_analysis.load", name
