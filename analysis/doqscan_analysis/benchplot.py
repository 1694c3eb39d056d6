"""dnsbench's latency histogram as a figure (dnsbench --plot FILE.png).

Reads the histogram CSV dnsbench writes (--histogram-csv; columns in
internal/dnsbench HistogramColumns) and draws, for each report (target, policy, load,
label, path loss), the share of answered queries per bin of resolve time over a log time
axis: bins are 1/16 of a power of two wide, so equal widths on the axis, and a share per
bin is comparable between bins and between reports.

    python -m doqscan_analysis.benchplot histogram.csv latency.png
"""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, PercentFormatter  # noqa: E402

from . import plots  # noqa: E402,F401  (the project's figure style: rcParams)

SERIES = ["target", "policy", "load", "workers", "streams", "label", "path_loss"]


def series_label(row) -> str:
    parts = [row["target"], f"policy={row['policy']}", f"load={row['load']}"]
    if isinstance(row["label"], str) and row["label"]:
        parts.append(row["label"])
    if pd.notna(row["path_loss"]):
        parts.append(f"loss={100 * float(row['path_loss']):g}%")
    return "  ".join(parts)


def steps(bins: pd.DataFrame):
    """Edges and values for ax.stairs: the bins in order, with zero-height gaps where
    bins are empty (they are not in the CSV)."""
    edges, values = [], []
    for lo, hi, share in bins[["lo_ms", "hi_ms", "share"]].itertuples(index=False):
        end = hi + 1e-6  # [lo, hi] in whole ns: the bin ends 1 ns after hi
        if edges and lo > edges[-1] + 1e-9:
            values.append(0.0)
            edges.append(lo)
        if not edges:
            edges.append(lo)
        values.append(share)
        edges.append(end)
    return edges, values


def figure(csv_path: str, metric: str = "resolve"):
    df = pd.read_csv(csv_path, dtype={"label": str, "variant": str}, keep_default_na=False,
                     na_values={"path_loss": [""]})
    df = df[df["metric"] == metric]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if df.empty:
        ax.text(0.5, 0.5, "no answered queries", ha="center", va="center", transform=ax.transAxes, color="#777777")
    for _, g in df.groupby(SERIES, sort=False, dropna=False):
        g = g.sort_values("lo_ms")
        edges, values = steps(g)
        n = int(g["count"].sum())
        ax.stairs(values, edges, label=f"{series_label(g.iloc[0])}  (n={n})", linewidth=1.5)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    # Less than a decade shows few major ticks: label the minor ones too.
    narrow = not df.empty and df["hi_ms"].max() < 10 * df["lo_ms"].min()
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}") if narrow else NullFormatter())
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    what = "resolve time (query's first packet to answer)" if metric == "resolve" else "total time (incl. session set-up)"
    ax.set_xlabel(f"{what}, ms (log scale)")
    ax.set_ylabel("share of answered queries per bin\n(bins 1/16 of a power of two wide)")
    ax.set_title(f"dnsbench: {metric} time histogram")
    if not df.empty:
        ax.legend(loc="best")
    fig.tight_layout()
    return fig


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m doqscan_analysis.benchplot HISTOGRAM.csv OUT.png", file=sys.stderr)
        return 2
    fig = figure(argv[0])
    fig.savefig(argv[1])
    plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
