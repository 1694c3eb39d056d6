"""Execute the analysis notebooks headless into a dated report folder.

    python -m doqscan_analysis.report [--source DIR|URL] [--engine duckdb|spark] [--out reports]
                                      [--weeks W ...] [--vantages V ...]

The source is PostgreSQL (--db/--source URL, $DATABASE_URL, the private cluster) or a
release directory written by `dataset export` (aggregated in SQL on DuckDB, or on Apache
Spark with --engine spark).

Writes reports/YYYY-MM-DDTHHMM/ (UTC) with each executed notebook (.ipynb), its HTML,
the figures as PNG and SVG (figures/), and index.html. Prints the time taken and the
peak memory (this process and the notebook kernels). Exit codes: 0 ok, 1 a notebook
failed, 2 usage, 3 database unreachable.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import logging
import os
import resource
import sys
import tempfile
import time

PKG_DIR = os.path.dirname(os.path.abspath(__file__))
ANALYSIS_DIR = os.path.dirname(PKG_DIR)
REPO = os.path.dirname(ANALYSIS_DIR)
NOTEBOOKS = ["adoption", "response_times", "benchmarks"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DB = 0, 1, 2, 3

log = logging.getLogger("doqscan.report")


def database_url(arg: str | None) -> str:
    """--db, else $DATABASE_URL, else the private cluster's URL (bin/dbctl url)."""
    if arg:
        return arg
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    from .db import dbctl_url
    return dbctl_url()


def report_dir(base: str, now: dt.datetime | None = None) -> str:
    """base/YYYY-MM-DDTHHMM, with -2, -3 ... when that minute already has a report."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H%M")
    path = os.path.join(base, stamp)
    n = 2
    while os.path.exists(path):
        path = os.path.join(base, f"{stamp}-{n}")
        n += 1
    os.makedirs(path)
    return path


def peak_rss_mb() -> tuple[float, float]:
    """Peak resident memory of this process and of its largest finished child (MB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, kids


def kernel_config(sockets: str):
    """Kernel settings for one notebook: its channels are Unix sockets in the private
    directory `sockets`. Over TCP each kernel manager picks five free ports by binding
    and closing them, and a kernel started in another process at the same moment can
    take one first: that kernel died with "Address already in use" and the other read
    messages signed with a foreign key ("Invalid Signature")."""
    from traitlets.config import Config
    c = Config()
    c.KernelManager.transport = "ipc"
    # The sockets are named after the connection file: <sockets>/kernel-ipc-1 ... -5.
    c.KernelManager.connection_file = os.path.join(sockets, "kernel.json")
    return c


def _execute(name: str, out: str, params: dict, timeout: int,
             folder: str = os.path.join(REPO, "notebooks")) -> tuple[float, str | None]:
    """Execute <folder>/<name>.ipynb (notebooks/ by default) into out/<name>.ipynb and
    .html; (seconds, error)."""
    import nbformat
    import papermill as pm
    from nbconvert import HTMLExporter

    src = os.path.join(folder, f"{name}.ipynb")
    dst = os.path.join(out, f"{name}.ipynb")
    t0 = time.monotonic()
    log.info("executing %s", src)
    error = None
    try:
        with tempfile.TemporaryDirectory(prefix="doqscan-kernel-") as sockets:
            pm.execute_notebook(src, dst, parameters=params, kernel_name="python3", cwd=folder,
                                progress_bar=False, execution_timeout=timeout, log_output=False,
                                config=kernel_config(sockets))
    except Exception as e:  # papermill raises PapermillExecutionError with the cell's traceback
        # PapermillExecutionError's text starts with an empty line; its ename/evalue say
        # what failed (the full traceback is in the executed notebook).
        what = f"{getattr(e, 'ename', '')}: {getattr(e, 'evalue', '')}" if hasattr(e, "ename") else str(e)
        error = f"{type(e).__name__}: {what}"
        log.error("%s failed: %s (cell %s; the executed notebook %s has the traceback)", name, error,
                  getattr(e, "exec_count", "?"), dst)
    secs = time.monotonic() - t0
    if os.path.exists(dst):
        nb = nbformat.read(dst, as_version=4)
        body, _ = HTMLExporter().from_notebook_node(nb)
        with open(os.path.join(out, f"{name}.html"), "w") as f:
            f.write(body)
    log.info("%s: %.1f s%s", name, secs, f" (FAILED: {error.splitlines()[0]})" if error else "")
    return secs, error


class TreeMemory:
    """Samples the resident memory of this process and all its descendants (the notebook
    processes and kernels) every `interval` seconds; `peak_mb` is the largest sum seen,
    i.e. the report's peak memory when notebooks run at once (PostgreSQL's backends are
    the server's and not counted)."""

    def __init__(self, interval: float = 0.25):
        import threading
        self.interval = interval
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psutil
        me = psutil.Process()
        while True:
            total = 0
            for p in [me] + me.children(recursive=True):
                try:
                    total += p.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            self.peak_mb = max(self.peak_mb, total / 2**20)
            if self._stop.wait(self.interval):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def parameters(db: str, out: str, weeks=None, vantages=None, siblings: str = "", engine: str = "duckdb",
               spark_master: str = "") -> dict:
    """The parameters every notebook gets (each one's parameters cell declares them all,
    those it does not use too, so that papermill warns of none). db is the source: a
    PostgreSQL URL or a release directory (dataset export)."""
    # The notebooks run in notebooks/: relative paths would be read from there.
    if db and os.path.isdir(db):
        db = os.path.abspath(db)
    return {"source": db, "engine": engine, "spark_master": spark_master, "database_url": "",
            "weeks": weeks, "vantages": vantages, "output_dir": out,
            "siblings_file": os.path.abspath(siblings) if siblings else ""}


def run(db: str, out_base: str, weeks=None, vantages=None, notebooks=NOTEBOOKS,
        timeout: int = 1800, parallel: bool = True, siblings: str = "", engine: str = "duckdb",
        spark_master: str = "") -> dict:
    """Execute the notebooks into a new dated folder; return a summary dict.

    With `parallel` (the default) every notebook runs at once, each in its own process
    and kernel: adoption's figures (Python, one core) overlap response_times' wait for
    PostgreSQL (benchmarks, the dnsbench runs, is small), and the peak memory is the sum of the kernels (~1.5 GB on the 10 M bench)."""
    # absolute: the notebooks run in notebooks/ and write their figures to output_dir
    out = report_dir(os.path.abspath(out_base))
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    release = bool(db) and os.path.isdir(db)
    summary = {"folder": out, "database": _redact(db), "source": "release" if release else "postgresql",
               "engine": engine if release else "postgresql", "weeks": weeks, "vantages": vantages,
               "started": dt.datetime.now(dt.UTC).isoformat(), "notebooks": {}}
    params = parameters(db, out, weeks, vantages, siblings, engine, spark_master)
    with TreeMemory() as mem:
        if parallel and len(notebooks) > 1:
            # spawn, not fork: a fork while TreeMemory's thread (or psycopg's, logging's)
            # holds a lock left a worker waiting forever on that lock (seen once in 3 runs)
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor
            with ProcessPoolExecutor(max_workers=len(notebooks), mp_context=multiprocessing.get_context("spawn")) as ex:
                futs = {name: ex.submit(_execute, name, out, params, timeout) for name in notebooks}
                results = {}
                for name, fut in futs.items():
                    try:
                        results[name] = fut.result()
                    except Exception as e:  # the worker itself died (e.g. killed for memory)
                        results[name] = (0.0, f"{type(e).__name__}: {e}")
        else:
            results = {name: _execute(name, out, params, timeout) for name in notebooks}
    ok = True
    for name in notebooks:
        secs, error = results[name]
        ok = ok and error is None
        summary["notebooks"][name] = {"seconds": round(secs, 1), "error": error}
    summary["parallel"] = bool(parallel and len(notebooks) > 1)
    write_readme_csv(os.path.join(out, "figures"))
    figs = sorted(os.listdir(os.path.join(out, "figures"))) if os.path.isdir(os.path.join(out, "figures")) else []
    summary["figures"] = figs
    summary["ok"] = ok
    own, kids = peak_rss_mb()
    summary["peak_rss_mb"] = {"report": round(own), "largest_kernel": round(kids),
                              "all_processes": round(max(mem.peak_mb, own, kids))}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    _index(out, summary)
    return summary


def _redact(url: str) -> str:
    import re
    return re.sub(r"(password=)\S+|(://[^:/@]+:)[^@]+@", lambda m: (m.group(1) or m.group(2)) + "***" +
                  ("" if m.group(1) else "@"), url)


def write_readme_csv(figures_dir: str) -> str | None:
    """figures/README.csv: one row per column of every CSV table there (file, column,
    unit by plots.UNITS, the figures drawn from the table). None without tables."""
    import csv

    from . import plots
    if not os.path.isdir(figures_dir):
        return None
    names = sorted(os.listdir(figures_dir))
    tables = [f for f in names if f.endswith(".csv") and f != "README.csv"]
    if not tables:
        return None
    drawn = {}
    for f in names:
        if f.endswith(".png"):
            for t in plots.figure_tables(f[:-4]):
                drawn.setdefault(t, []).append(f)
    path = os.path.join(figures_dir, "README.csv")
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "column", "unit", "figures"])
        for t in tables:
            with open(os.path.join(figures_dir, t), newline="") as src:
                rows = list(csv.reader(src))
            header = rows[0] if rows else []
            for i, col in enumerate(header):
                # A unit only for a column of numbers: a name such as key_share ends in a
                # unit's word but holds labels (x25519).
                values = [r[i] for r in rows[1:] if i < len(r) and r[i] != ""]
                unit = plots.unit_of(col) if all(_is_number(v) for v in values) else ""
                w.writerow([t, col, unit, " ".join(drawn.get(t[:-4], []))])
    return path


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _index(out: str, s: dict) -> None:
    from . import plots
    rows = "".join(
        f"<li><a href='{n}.html'>{n}</a> ({v['seconds']} s){' <b>FAILED</b>: ' + html.escape(v['error'][:300]) if v['error'] else ''}</li>"
        for n, v in s["notebooks"].items())

    def numbers(png: str) -> str:
        ts = [t + ".csv" for t in plots.figure_tables(png[:-4]) if t + ".csv" in s["figures"]]
        return (" (numbers: " + ", ".join(f"<a href='figures/{html.escape(t)}'>{html.escape(t)}</a>" for t in ts) + ")"
                if ts else "")
    figs = "".join(f"<li><a href='figures/{html.escape(f)}'>{html.escape(f)}</a>{numbers(f)}</li>"
                   for f in s["figures"] if f.endswith(".png"))
    tables = "".join(f"<li><a href='figures/{html.escape(f)}'>{html.escape(f)}</a></li>" for f in s["figures"]
                     if f.endswith(".csv") and f != "README.csv")
    readme = ("<p>Headers: lower-case words joined by <code>_</code>, the unit last (<code>_ms</code>, <code>_s</code>, "
              "<code>_ns</code>, <code>_bytes</code>; <code>share</code>, <code>rate</code>: 0..1); every column with its "
              "unit and the figures drawn from its table: <a href='figures/README.csv'>README.csv</a>.</p>"
              if "README.csv" in s["figures"] else "")
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(f"<!doctype html><meta charset=utf-8><title>doqscan report {html.escape(os.path.basename(out))}</title>"
                f"<h1>doqscan report {html.escape(os.path.basename(out))}</h1>"
                f"<p>database: <code>{html.escape(s['database'])}</code>; weeks: {html.escape(str(s['weeks'] or 'all'))}; "
                f"vantage points: {html.escape(str(s['vantages'] or 'all'))}</p>"
                f"<h2>Notebooks</h2><ul>{rows}</ul><h2>Figures (PNG; SVG beside them)</h2><ul>{figs}</ul>"
                f"<h2>Tables (CSV: the numbers the figures draw)</h2>{readme}<ul>{tables}</ul>")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="report", description="Execute notebooks/adoption.ipynb, notebooks/response_times.ipynb and "
        "notebooks/benchmarks.ipynb headless against a doqscan database into reports/YYYY-MM-DDTHHMM/ (HTML, PNG, SVG).",
        epilog="examples:\n  ./dev report\n  ./dev report --db 'host=/tmp dbname=doqscan' --weeks 2026-W46 2026-W47\n"
               "  ./dev report --source release/                      # the release dataset export wrote, on DuckDB\n"
               "  ./dev report --source release/ --engine spark       # the same aggregations on Spark local[2]\n"
               "  python -m doqscan_analysis.report --out /tmp/reports --vantages vp1",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", help="a release directory (dataset export: Parquet files, aggregated on --engine) or "
                    "a PostgreSQL URL (default: --db, $DATABASE_URL, else bin/dbctl url)")
    ap.add_argument("--db", help="libpq connection string or URL (default: $DATABASE_URL, else bin/dbctl url)")
    ap.add_argument("--engine", choices=["duckdb", "spark"], default="duckdb",
                    help="engine of a release's aggregations: duckdb (default, in process) or spark (Apache Spark)")
    ap.add_argument("--spark-master", default="", help="Spark master URL (default local[2]; spark://HOST:7077 for a cluster)")
    ap.add_argument("--out", default=os.path.join(REPO, "reports"), help="base folder (default: <repo>/reports)")
    ap.add_argument("--weeks", nargs="*", help="ISO weeks to include (default: all)")
    ap.add_argument("--vantages", nargs="*", help="vantage points to include (default: all)")
    ap.add_argument("--notebooks", nargs="*", default=NOTEBOOKS, choices=NOTEBOOKS)
    ap.add_argument("--siblings", default="",
                    help="CSV address4,address6 of declared dual-stack pairs: each counts as one resolver "
                         "where both addresses present the same certificate (testbed: var/testnet/INST/siblings.csv)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per notebook cell (default 1800)")
    ap.add_argument("--sequential", action="store_true",
                    help="execute the notebooks one after the other (default: at once, each in its own kernel)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    if args.source and os.path.isdir(args.source):
        if not os.path.isfile(os.path.join(args.source, "manifest.json")):
            log.error("%s: not a release (no manifest.json; dataset export writes one)", args.source)
            return EXIT_USAGE
        db = args.source
    else:
        try:
            db = database_url(args.source or args.db)
            import psycopg
            with psycopg.connect(db, connect_timeout=10) as c:
                c.execute("SELECT 1 FROM measurements LIMIT 1")
        except Exception as e:
            log.error("database not usable: %s", e)
            return EXIT_DB
    t0 = time.monotonic()
    s = run(db, args.out, args.weeks or None, args.vantages or None, args.notebooks, args.timeout,
            parallel=not args.sequential, siblings=os.path.abspath(args.siblings) if args.siblings else "",
            engine=args.engine, spark_master=args.spark_master)
    secs = time.monotonic() - t0
    print(f"report: {s['folder']}")
    print(f"report: {len(s['figures'])} figure files, notebooks: " +
          ", ".join(f"{n} {v['seconds']} s{' FAILED' if v['error'] else ''}" for n, v in s["notebooks"].items()))
    print(f"report: total {secs:.1f} s, peak RSS {s['peak_rss_mb']['all_processes']} MB (report and kernels "
          f"together), {s['peak_rss_mb']['largest_kernel']} MB (largest notebook kernel)")
    return EXIT_OK if s["ok"] else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
