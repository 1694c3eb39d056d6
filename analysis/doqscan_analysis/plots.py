"""Matplotlib figures of the study (readable on their own: titles, axis labels with
units, legends, log axes where latency spans orders of magnitude)."""

from __future__ import annotations

import os
import re
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, PercentFormatter

from . import names, stats

plt.rcParams.update({
    "figure.dpi": 100, "savefig.dpi": 150, "font.size": 10, "axes.grid": True,
    "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
    "legend.fontsize": 9, "svg.fonttype": "none",
})

CAUSE_COLORS = {
    "1rtt": "#2ca02c", "retry": "#ff7f0e", "version-negotiation": "#9467bd",
    "amplification": "#d62728", "loss": "#8c564b", "multiple": "#e377c2", "unknown": "#7f7f7f",
}
CAUSE_LABELS = {
    "1rtt": "1-RTT", "retry": "Retry", "version-negotiation": "Version Negotiation",
    "amplification": "amplification stall", "loss": "loss", "multiple": "several", "unknown": "unknown",
}
MODE_STYLES = {"fresh": "-", "resumed": "--", "0rtt": ":", "persistent": "-."}
# DoT and DoH usually overlap (same TCP+TLS handshakes): DoT dashed so both stay visible.
# Resolve times and RTTs of all protocols nearly coincide (the study's Fig. 3a): a dash
# pattern per protocol keeps every line visible where they overlap.
PROTOCOL_STYLES = {"doudp": (0, (1, 1.5)), "dotcp": "-", "dot": (0, (6, 2)), "doh": (0, (3, 1.5, 1, 1.5)),
                   "doq": "-", "doh3": (0, (8, 2, 1, 2))}
MODE_COLORS = {"fresh": "#1f77b4", "resumed": "#ff7f0e", "0rtt": "#2ca02c", "persistent": "#9467bd"}


def save(fig, outdir: str | None, name: str) -> list[str]:
    """Write fig as PNG and SVG into outdir/figures (nothing when outdir is None)."""
    if not outdir:
        return []
    d = os.path.join(outdir, "figures")
    os.makedirs(d, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        p = os.path.join(d, f"{name}.{ext}")
        fig.savefig(p, bbox_inches="tight")
        paths.append(p)
    return paths


def publish(fig, outdir: str | None, name: str) -> None:
    """save(), then show the figure in the notebook: the saved PNG itself when there is
    one (shown at 100 dpi; matplotlib does not render the figure a third time: ~1/3 of
    the figure time on the 10 M report), else plt.show(). Closes the figure. Returns
    None, so that a cell ending with it prints nothing more."""
    paths = save(fig, outdir, name)
    png = next((p for p in paths if p.endswith(".png")), None)
    if png is None:
        plt.show()
        return
    from IPython.display import Image, display
    with open(png, "rb") as f:
        data = f.read()
    width = int.from_bytes(data[16:20], "big")  # IHDR width (PNG: the first chunk)
    dpi = plt.rcParams["savefig.dpi"]
    scale = plt.rcParams["figure.dpi"] / dpi if isinstance(dpi, (int, float)) else 1.0
    display(Image(data=data, format="png", width=max(1, round(width * scale))))
    plt.close(fig)


def show(df: pd.DataFrame, why: str, fmt=None) -> None:
    """Display a table in the notebook, or, when it has no row, "no data: <why>" (an
    empty frame prints as "Empty DataFrame", which says neither that nor why). `fmt`:
    a Styler format (e.g. "{:.1%}", or a dict per column)."""
    from IPython.display import Markdown, display
    if df is None or len(df) == 0:
        display(Markdown(f"no data: {why}"))
        return
    display(df.style.format(fmt) if fmt is not None else df)


def _ms_formatter():
    return FuncFormatter(lambda v, _: f"{v:g}")


def _empty(ax, what: str):
    ax.text(0.5, 0.5, f"no data: {what}", ha="center", va="center", transform=ax.transAxes,
            color="#777777")


def caption(fig, text: str):
    """The figure's population under it (what was counted, n per series): part of the
    saved PNG and SVG, so the figure says what it shows when read on its own."""
    fig.text(0.01, 0.0, text, ha="left", va="top", fontsize=8.5, color="#333333", wrap=True)
    return fig


def fmt_n(n) -> str:
    """A count as the figures print it: n=1,234."""
    return f"n={int(n):,}"


def stacked_weeks(pivot: pd.DataFrame, title: str, ylabel: str, ax=None, legend_title: str = "",
                  cmap: str = "tab10"):
    """Stacked bars per ISO week (rows of `pivot`), one colour per column (Fig. 1)."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(pivot) + 4), 5))
    fig = ax.figure
    if pivot.empty:
        _empty(ax, title)
        return fig
    colors = plt.get_cmap(cmap if pivot.shape[1] <= 10 else "tab20").colors
    bottom = np.zeros(len(pivot))
    x = np.arange(len(pivot))
    for i, col in enumerate(pivot.columns):
        vals = pivot[col].to_numpy(float)
        ax.bar(x, vals, bottom=bottom, label=str(col), color=colors[i % len(colors)], width=0.8)
        bottom += vals
    # each week's total over its bar: the population of that bar
    for xi, tot in zip(x, bottom):
        ax.text(xi, tot, fmt_n(tot), ha="center", va="bottom", fontsize=7, rotation=90 if len(pivot) > 12 else 0)
    ax.set_ylim(0, max(float(bottom.max()), 1.0) * 1.12)
    ax.set_xticks(x, pivot.index, rotation=60 if len(pivot) > 6 else 0, ha="right" if len(pivot) > 6 else "center")
    ax.set_xlabel("ISO week")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="x", visible=False)
    ax.legend(title=legend_title or None, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def port_share_lines(shares: pd.DataFrame, ax=None):
    """Share of DoQ-verified resolvers offering DoQ on each port, per week (load.port_shares:
    iso_week, port, resolvers, total, share): a line per port; one week alone as a bar
    per port (a line of one point is a dot). The x labels give each week's n (total)."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 4.5))
    fig = ax.figure
    if shares.empty:
        _empty(ax, "no DoQ-verified resolver with a recorded port")
        ax.set_title("DoQ ports offered by verified resolvers")
        return fig
    p = shares.pivot_table(index="iso_week", columns="port", values="share", fill_value=0)
    totals = shares.groupby("iso_week")["total"].max().reindex(p.index)
    labels = [f"{w}\n{fmt_n(t)}" for w, t in zip(p.index, totals)]
    if len(p) == 1:
        x = np.arange(len(p.columns))
        vals = p.iloc[0].to_numpy(float)
        ax.bar(x, vals, color="#4c72b0", width=0.6)
        for xi, v, port in zip(x, vals, p.columns):
            n = int(shares[(shares["port"] == port)]["resolvers"].sum())
            ax.text(xi, v, f"{v:.1%} ({n:,})", ha="center", va="bottom", fontsize=9)
        ax.set_xticks(x, [f"UDP/{port}" for port in p.columns])
        ax.set_xlabel(f"port (one week: {labels[0].replace(chr(10), ', ')} DoQ-verified resolvers)")
        ax.grid(axis="x", visible=False)
    else:
        x = np.arange(len(p))
        for port in p.columns:
            ax.plot(x, p[port].to_numpy(), marker="o", label=f"UDP/{port}")
        ax.set_xticks(x, labels, rotation=60 if len(p) > 6 else 0, ha="right" if len(p) > 6 else "center")
        ax.set_xlabel("ISO week (n: DoQ-verified resolvers with a recorded port)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_ylim(0, 1.05)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("share of DoQ-verified resolvers")
    ax.set_title("DoQ ports offered by verified resolvers")
    return fig


def retention_lines(churn_by_kind: dict[str, pd.DataFrame], ax=None):
    """Share of the first week's resolvers still in the set, per week, per kind
    (stats.churn); the legend gives each kind's n (its first week's resolvers). Retention
    needs a second week: with one week or none the panel says so."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 4.5))
    fig = ax.figure
    drawn = [k for k, c in churn_by_kind.items() if len(c) > 1]
    for kind in drawn:
        c = churn_by_kind[kind]
        ax.plot(c["iso_week"], c["retention_first"], marker="o",
                label=f"{kind} ({fmt_n(c['total'].iloc[0])} in {c['iso_week'].iloc[0]})")
    if not drawn:
        weeks = sorted({w for c in churn_by_kind.values() for w in c.get("iso_week", [])})
        _empty(ax, "retention needs two weeks or more; " +
               (f"the data has one ({weeks[0]})" if len(weeks) == 1 else "the data has none"))
    ax.set_ylim(0, 1.05)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("ISO week")
    ax.set_ylabel("share of first week's resolvers still present")
    ax.set_title("Retention since the first week" + (", " + " vs ".join(drawn) if drawn else ""))
    weeks = max((len(c) for c in churn_by_kind.values()), default=0)
    if weeks > 6:  # slanted labels only when they would overlap (as in the other weekly figures)
        ax.tick_params(axis="x", rotation=60)
        for t in ax.get_xticklabels():
            t.set_ha("right")
    if drawn:
        ax.legend(frameon=False)
    return fig


def barh_counts(df: pd.DataFrame, label: str, value: str = "resolvers", title: str = "", top: int = 15, ax=None,
                total: int | None = None, xlabel: str | None = None):
    """Horizontal bars of the `top` largest rows, with the count and its share of
    `total` (default: the sum of `value`) printed; the title says how many rows are shown
    ('top 15 of 40', or 'all 7')."""
    d = df.head(top).iloc[::-1]
    if title and len(df):
        title += f" (top {len(d)} of {len(df)})" if len(df) > len(d) else f" (all {len(d)})"
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 0.35 * max(len(d), 3) + 1.2))
    fig = ax.figure
    if d.empty:
        _empty(ax, title)
        return fig
    total = int(total if total is not None else df[value].sum())
    ax.barh(d[label].astype(str), d[value], color="#4c72b0")
    for y, v in enumerate(d[value]):
        ax.text(v, y, f" {v} ({100 * v / total:.1f}%)", va="center", fontsize=8)
    ax.set_xlabel(xlabel or f"{value} (of {total})")
    ax.set_title(title)
    ax.grid(axis="y", visible=False)
    ax.set_xlim(0, d[value].max() * 1.3)
    return fig


def _cdf_lines(ax, rt: pd.DataFrame, metric: str, scale: float, style_col: str | None = None,
               label_extra=None):
    drawn = 0
    order = {p: i for i, p in enumerate(names.PROTOCOLS)}
    rows = sorted(rt.itertuples(index=False), key=lambda r: order.get(r.protocol, 99))
    for r in rows:
        q = getattr(r, f"{metric}_q")
        if len(q) == 0:
            continue
        x, y = stats.ecdf_points(q / scale)
        style = MODE_STYLES.get(getattr(r, style_col), "-") if style_col else PROTOCOL_STYLES.get(r.protocol, "-")
        label = names.PROTOCOL_LABELS.get(r.protocol, r.protocol)
        if label_extra:
            label += label_extra(r)
        # dashed lines on top of solid ones, so identical distributions stay visible
        ax.step(x, y, where="post", color=names.PROTOCOL_COLORS.get(r.protocol, "black"), linestyle=style,
                label=f"{label} ({series_n(r, metric)})", linewidth=1.6, zorder=2 if style == "-" else 3)
        drawn += 1
    return drawn


def series_n(r, metric: str) -> str:
    """The population of one ECDF line: its measurements and, where known, the resolvers
    they come from (a row of load.response_times)."""
    n = fmt_n(getattr(r, f"{metric}_n"))
    res = getattr(r, "resolvers", None)
    return n if res is None or pd.isna(res) else f"{n} of {int(res):,} resolvers"


FIG3_CAPTION = ("n: measurements of each line, and the resolvers they come from. The resolvers are the same set "
                "for every protocol ({subset}); the measurements differ: one per port a resolver answers on "
                "(DoQ on 784, 853 and 8853) and hour, and only those with an answered RTT (except DoUDP).")


def _log_ms_axis(ax, label: str):
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(_ms_formatter())
    ax.set_xlabel(label)
    ax.set_ylabel("CDF (share of measurements)")
    ax.set_ylim(0, 1.01)


def cdf_figure(rt: pd.DataFrame, metric: str, title: str, xlabel: str, log: bool = True,
               style_col: str | None = None, label_extra=None, ax=None, ratio_marks: bool = False):
    """One panel of ECDFs, one line per row of `rt` (load.response_times output)."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
    fig = ax.figure
    scale = 1.0 if metric == "ratio" else stats.NS_PER_MS
    if _cdf_lines(ax, rt, metric, scale, style_col, label_extra) == 0:
        _empty(ax, title)
    if log:
        _log_ms_axis(ax, xlabel)
    else:
        ax.set_xlabel(xlabel)
        ax.set_ylabel("CDF (share of measurements)")
        ax.set_ylim(0, 1.01)
    if ratio_marks:
        for k in (1, 2, 3, 4):
            ax.axvline(k, color="#444444", linewidth=0.6, linestyle=":")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", frameon=True, framealpha=0.9)
    return fig


def fig3a(rt: pd.DataFrame, subset: str = "DoX"):
    """Resolve time (left) and RTT (right) ECDFs per protocol (the study's Fig. 3a)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(14, 5))
    cdf_figure(rt, "resolve_ns", f"Resolve time, {subset} resolvers", "resolve time [ms] (log scale)", ax=a)
    cdf_figure(rt[rt["protocol"] != "doudp"] if subset else rt, "rtt_ns",
               f"RTT (same transport and port), {subset} resolvers", "RTT [ms] (log scale)", ax=b)
    fig.tight_layout()
    return caption(fig, FIG3_CAPTION.format(subset=subset))


def fig3b(measured: pd.DataFrame, warmup: pd.DataFrame | None = None, subset: str = "DoX"):
    """Handshake time (left) and handshake-to-RTT ratio (right) ECDFs per protocol; the
    DoQ warm-up (first contact) as a dashed line (the study's Fig. 3b)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(14, 5))
    m = measured[measured["protocol"] != "doudp"]
    w = warmup[warmup["protocol"] == "doq"] if warmup is not None else None
    extra = lambda r: ""  # noqa: E731
    for ax, metric, title, xlabel, log in (
            (a, "handshake_ns", f"Handshake time, {subset} resolvers", "handshake time [ms] (log scale)", True),
            (b, "ratio", f"Handshake-to-RTT ratio, {subset} resolvers", "handshake time / RTT [round trips]", False)):
        cdf_figure(m, metric, title, xlabel, log=log, ax=ax, label_extra=extra, ratio_marks=not log)
        if w is not None and len(w):
            _cdf_warmup(ax, w, metric)
            ax.legend(loc="lower right", frameon=True, framealpha=0.9)
    b.set_xlim(0, 6)
    fig.tight_layout()
    return caption(fig, FIG3_CAPTION.format(subset=subset))


def _cdf_warmup(ax, w: pd.DataFrame, metric: str):
    scale = 1.0 if metric == "ratio" else stats.NS_PER_MS
    for r in w.itertuples(index=False):
        q = getattr(r, f"{metric}_q")
        if len(q) == 0:
            continue
        x, y = stats.ecdf_points(q / scale)
        ax.step(x, y, where="post", color=names.PROTOCOL_COLORS["doq"], linestyle="--", linewidth=1.6,
                label=f"DoQ warm-up ({series_n(r, metric)})")


def modes_figure(rt: pd.DataFrame, metric: str = "handshake_ns", title: str = ""):
    """Connection modes side by side: one panel per protocol, one ECDF per mode (fresh,
    resumed, 0-RTT, persistent) in its own colour."""
    order = {p: i for i, p in enumerate(names.PROTOCOLS)}
    protos = sorted(rt["protocol"].unique(), key=lambda p: order.get(p, 99)) if len(rt) else []
    n = max(len(protos), 1)
    cols = min(n, 3)
    rows_n = (n + cols - 1) // cols
    fig, axs = plt.subplots(rows_n, cols, figsize=(5.2 * cols, 4.0 * rows_n), squeeze=False, sharey=True)
    scale = 1.0 if metric == "ratio" else stats.NS_PER_MS
    for ax, proto in zip(axs.flat, protos):
        for r in rt[rt["protocol"] == proto].itertuples(index=False):
            q = getattr(r, f"{metric}_q")
            if len(q) == 0:
                continue
            x, y = stats.ecdf_points(q / scale)
            style = MODE_STYLES.get(r.mode, "-")
            ax.step(x, y, where="post", color=MODE_COLORS.get(r.mode, "black"), linestyle=style,
                    linewidth=1.6 if style == "-" else 2.0, zorder=2 if style == "-" else 3,
                    label=f"{r.mode} ({series_n(r, metric)})")
        if metric == "ratio":
            ax.set_xlabel("handshake time / RTT")
        else:
            _log_ms_axis(ax, "time [ms] (log scale)")
        ax.set_ylabel("CDF")
        ax.set_ylim(0, 1.01)
        ax.set_title(names.PROTOCOL_LABELS.get(proto, proto))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", title="mode", frameon=True, framealpha=0.9)
    for ax in list(axs.flat)[len(protos):]:
        ax.axis("off")
    if not protos:
        _empty(axs.flat[0], title)
    fig.suptitle(title or "by connection mode")
    fig.tight_layout()
    return fig


def cause_bars(shares: pd.DataFrame, counts: pd.Series | None = None, title: str = "", ylabel: str = ""):
    """Stacked horizontal bars: share of DoQ handshakes by cause per group (rows)."""
    fig, ax = plt.subplots(figsize=(10, 0.5 * max(len(shares), 2) + 1.6))
    if shares.empty:
        _empty(ax, title)
        return fig
    left = np.zeros(len(shares))
    labels = [" / ".join(map(str, i)) if isinstance(i, tuple) else str(i) for i in shares.index]
    if counts is not None:
        labels = [f"{lab} (n={int(counts.loc[i]):,})" for lab, i in zip(labels, shares.index)]
    for cause in [c for c in CAUSE_COLORS if c in shares.columns]:
        v = shares[cause].to_numpy(float)
        ax.barh(labels, v, left=left, color=CAUSE_COLORS[cause], label=CAUSE_LABELS[cause])
        left += v
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("share of DoQ handshakes")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", visible=False)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="cause")
    ax.invert_yaxis()
    return fig


# One colour per vantage point (the protocols keep theirs in the difference panel).
VANTAGE_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
VANTAGE_STYLES = ["-", "--", ":", "-."]


def _grouped_bars(ax, table: pd.DataFrame, col: str, vps: list, title: str, n_col: str = "common_resolvers"):
    order = {p: i for i, p in enumerate(names.PROTOCOLS)}
    d = table[table[col].notna()]
    protos = sorted(d["protocol"].unique(), key=lambda p: order.get(p, 99))
    if not protos:
        _empty(ax, title)
        ax.set_title(title)
        return
    width = 0.8 / max(len(vps), 1)
    x = np.arange(len(protos))
    top = float(d[col].max())
    for i, vp in enumerate(vps):
        vals = [d[(d["protocol"] == p) & (d["vantage_id"] == vp)][col] for p in protos]
        vals = [float(v.iloc[0]) if len(v) else np.nan for v in vals]
        pos = x - 0.4 + width * (i + 0.5)
        ax.bar(pos, vals, width * 0.92, color=VANTAGE_COLORS[i % len(VANTAGE_COLORS)], label=vp)
        for px, v in zip(pos, vals):
            if not np.isnan(v):
                ax.text(px, v + 0.01 * top, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    # each protocol's bars are medians over its own resolvers: n under its name
    ns = d.groupby("protocol")[n_col].max()
    ax.set_xticks(x, [f"{names.PROTOCOL_LABELS.get(p, p)}\n{fmt_n(ns[p])}" for p in protos])
    # headroom above the bars for the value labels and the legend
    ax.set_ylim(0, top * 1.35 if top > 0 else 1)
    ax.set_ylabel("median over resolvers [ms]")
    ax.set_title(title)
    ax.grid(axis="x", visible=False)
    ax.legend(title="vantage point", loc="upper center", ncol=min(len(vps), 4), frameon=True, framealpha=0.9)


def vantage_figure(per: pd.DataFrame, table: pd.DataFrame, subset: str = "measured, fresh connections"):
    """Vantage points compared on the same resolvers (stats.vantage_comparison):
    median resolve time and median RTT per protocol, one bar per vantage point (left,
    middle), and the ECDF of the per-resolver difference of resolve time to the reference
    vantage point, one line per protocol and other vantage point (right)."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(17, 5), gridspec_kw={"width_ratios": [1, 1, 1.2]})
    vps = sorted(table["vantage_id"].unique()) if len(table) else []
    _grouped_bars(a, table, "resolve_median_ms", vps, "Resolve time")
    _grouped_bars(b, table[table["protocol"] != "doudp"], "rtt_median_ms", vps,
                  "RTT (same transport and port)", n_col="rtt_resolvers")
    ref = table["reference"].iloc[0] if len(table) else None
    drawn = 0
    if ref is not None and len(vps) > 1:
        common = stats.common_resolvers(per)
        order = {p: i for i, p in enumerate(names.PROTOCOLS)}
        base = per[per["vantage_id"] == ref].set_index(["protocol", "address"])["resolve_ns"]
        others = [v for v in vps if v != ref]
        for j, vp in enumerate(others):
            d = per[per["vantage_id"] == vp]
            for proto in sorted(d["protocol"].unique(), key=lambda p: order.get(p, 99)):
                g = d[(d["protocol"] == proto) & d["address"].isin(common[proto])]
                delta = (g.set_index(["protocol", "address"])["resolve_ns"] - base).dropna() / stats.NS_PER_MS
                if delta.empty:
                    continue
                x, y = stats.ecdf(delta.to_numpy())
                label = names.PROTOCOL_LABELS.get(proto, proto) + (f", {vp}" if len(others) > 1 else "")
                c.step(x, y, where="post", color=names.PROTOCOL_COLORS.get(proto, "black"),
                       linestyle=VANTAGE_STYLES[j % len(VANTAGE_STYLES)], linewidth=1.6,
                       label=f"{label} (n={len(delta):,})")
                drawn += 1
        c.axvline(0, color="#444444", linewidth=0.8)
    if drawn:
        c.set_ylim(0, 1.01)
        c.legend(loc="best", frameon=True, framealpha=0.9)
    else:
        _empty(c, "a second vantage point")
    other = ", ".join(v for v in vps if v != ref) or "other"
    c.set_xlabel(f"resolve time {other} minus {ref} [ms] (same resolver)")
    c.set_ylabel("CDF (share of resolvers)")
    c.set_title(f"Per-resolver difference to {ref}")
    fig.suptitle(f"Vantage points compared on the same resolvers, per protocol ({subset})")
    fig.tight_layout()
    return caption(fig, "n under each protocol: the resolvers that answered it from every vantage point "
                        "(for the RTT: of those, the ones with an answered RTT from each); a protocol's bars are "
                        "medians over its own resolvers, so n differs between protocols.")


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


# The CSV table(s) each figure is drawn from (figure name pattern -> tables): the report's
# index and README.csv link them; the tests read each figure's population from them.
FIGURE_TABLES = [
    (r"fig1_doq_quic_versions_per_week", ["fig1_doq_quic_versions_per_week"]),
    (r"quic_libraries_per_week", ["quic_libraries"]),
    (r"port_shares", ["port_shares"]),
    (r"scan_advertised_versions", ["scan_advertised_versions"]),
    (r"stack_fingerprints", ["stack_fingerprints"]),
    (r"top_providers", ["top_providers"]),
    (r"retention", ["retention_doq", "retention_doudp"]),
    (r"countries_ases", ["geo_countries", "geo_ases"]),
    (r"fig2_world_map", ["fig2_world_map"]),
    (r"(fig3a_resolve_rtt|fig3b_handshake_ratio|modes_handshake|modes_resolve)_.+", ["response_times_quantiles"]),
    (r"vantage_comparison", ["vantage_comparison"]),
    (r"doq_causes_.+", ["doq_causes"]),
    (r"amplification_stalls", ["amplification_cells"]),
    (r"loss_sweep", ["loss_sweep_qps", "loss_sweep_latency_mean_ms", "loss_sweep_success_rate"]),
]


def figure_tables(figure: str) -> list[str]:
    """The CSV tables (names without .csv) figure `figure` (its name without extension)
    is drawn from; [] for a figure not listed in FIGURE_TABLES."""
    for pattern, tables in FIGURE_TABLES:
        if re.fullmatch(pattern, figure):
            return tables
    return []


# Units of the report's CSV columns, by the last token of their name (csv_header puts
# the unit last): README.csv in the figures folder lists every column with its unit.
UNITS = {"ms": "milliseconds", "ns": "nanoseconds", "s": "seconds", "bytes": "bytes", "b": "bytes",
         "share": "fraction (0..1)", "rate": "fraction (0..1)", "ratio": "ratio (handshake time / RTT)",
         "qps": "queries per second", "success": "fraction (0..1)"}
_UNIT_TOKENS = ("ms", "ns", "s", "bytes")


def csv_header(name) -> str:
    """One header style for every CSV table: lower-case words joined by '_', the unit
    last ('resolve median [ms]' -> 'resolve_median_ms', 'idle alive s (median)' ->
    'idle_alive_median_s', 'loss 0.5% ms' -> 'loss_0_5pct_ms'); a column of several levels (a MultiIndex, e.g. metric and
    vantage point) is the first level's name, then the others as they are, joined by '.'."""
    if isinstance(name, tuple):
        return ".".join([csv_header(name[0])] + [str(p) for p in name[1:] if str(p) != ""])
    words = re.findall(r"[a-z0-9]+", str(name).lower().replace("%", "pct"))
    units = [w for w in words if w in _UNIT_TOKENS]
    words = [w for w in words if w not in _UNIT_TOKENS] + units[-1:]
    return "_".join(words)


def unit_of(column: str) -> str:
    """The unit of a CSV column named as csv_header names them ('' when it has none: a
    count, a name, a label)."""
    last = column.rsplit(".", 1)[0].rsplit("_", 1)[-1]
    return UNITS.get(last, "")


def save_table(df: pd.DataFrame, outdir: str | None, name: str) -> str | None:
    """Write df as CSV beside the figures (outdir/figures/name.csv): the numbers a
    figure draws, machine-readable. Nothing when outdir is None. Headers in one style
    (csv_header); a frame with a named index (e.g. stats.side_by_side's protocol) keeps
    it as its first columns."""
    if not outdir:
        return None
    if any(n is not None for n in df.index.names):
        df = df.reset_index()
    cols = [csv_header(c) for c in df.columns]
    if len(set(cols)) != len(cols):
        raise ValueError(f"table {name}: columns {list(df.columns)} give duplicate CSV headers {cols}")
    df = df.set_axis(cols, axis=1)
    d = os.path.join(outdir, "figures")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, f"{name}.csv")
    # A temporary file of its own: the report runs the notebooks side by side and two of
    # them may write the same table (provenance.csv); with one shared ".tmp" name the
    # second rename found the file already moved away (FileNotFoundError).
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{name}.", suffix=".csv.tmp")
    try:
        # mkstemp makes the file 0600; the tables are published beside the figures,
        # which are 0644 (the umask's default for open()).
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", newline="") as f:
            df.to_csv(f, index=False)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return p


def loss_sweep_figure(frame: pd.DataFrame, title: str = ""):
    """The loss sweep (bench.sweep_frame): success rate (top) and mean resolve time of
    the answered queries (bottom) against the emulated loss per direction, one panel
    column per server, one line per protocol (its colour; the policy's dash when the
    sweep ran several)."""
    servers = list(dict.fromkeys(frame["server"])) if len(frame) else []
    n = max(len(servers), 1)
    fig, axs = plt.subplots(2, n, figsize=(5.2 * n, 7.5), squeeze=False, sharex=True)
    several = frame["policy"].nunique() > 1 if len(frame) else False
    for j, server in enumerate(servers):
        top, bottom = axs[0, j], axs[1, j]
        for _, g in frame[frame["server"] == server].groupby(["target", "policy"], sort=False):
            g = g.sort_values("path_loss")
            proto = g["protocol"].iloc[0]
            label = names.PROTOCOL_LABELS.get(proto, proto) + (f", {g['policy'].iloc[0]}" if several else "")
            style = dict(color=names.PROTOCOL_COLORS.get(proto, "black"), marker="o", linewidth=1.6,
                         linestyle=MODE_STYLES.get(g["policy"].iloc[0], "-") if several else "-", label=label)
            x = 100 * g["path_loss"].to_numpy(float)
            top.plot(x, g["success_rate"].to_numpy(float), **style)
            bottom.plot(x, g["latency_mean_ms"].to_numpy(float), **style)
        top.set_title(server)
        top.set_ylim(0, 1.03)
        top.yaxis.set_major_formatter(PercentFormatter(1.0))
        top.set_ylabel("success rate (answered / sent)")
        bottom.set_ylim(bottom=0)
        bottom.set_ylabel("mean resolve time, answered [ms]")
        bottom.set_xlabel("emulated loss per direction [%]")
        bottom.set_xticks(sorted(100 * frame["path_loss"].unique()))
        if top.get_legend_handles_labels()[0]:
            top.legend(loc="lower left", frameon=True, framealpha=0.9)
    if not servers:
        _empty(axs[0, 0], "no loss sweep stored")
        axs[1, 0].axis("off")
    fig.suptitle(title or "Loss sweep on the simulated internet")
    fig.tight_layout()
    return fig
