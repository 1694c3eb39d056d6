"""The analysis package is an installed package: it imports nothing from test folders,
and the notebooks import it without editing sys.path."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import pathlib

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
