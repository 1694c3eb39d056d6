"""Statistics on the frames load.py returns, and on raw arrays (for small data and tests).

Empirical CDFs here are exact: built from sorted values (or from exact order statistics
at evenly spaced ranks), never from histogram bins.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import names

NS_PER_MS = 1e6


def ecdf(values) -> tuple[np.ndarray, np.ndarray]:
    """Exact empirical CDF: sorted values x and F(x_i) = i/n (NaN/None dropped)."""
    x = np.sort(np.asarray([v for v in values if v is not None], dtype=float))
    x = x[~np.isnan(x)]
    n = len(x)
    return x, np.arange(1, n + 1) / n if n else np.empty(0)


def ecdf_points(q) -> tuple[np.ndarray, np.ndarray]:
    """ECDF points from order statistics at ranks k/M, k = 1..M (load.response_times'
    *_q arrays): x = q, F = k/M. Exact at those ranks; the step between ranks is 1/M."""
    q = np.asarray(q, dtype=float)
    m = len(q)
    return q, np.arange(1, m + 1) / m if m else np.empty(0)


def share_at_most(q, x: float) -> float:
    """F(x) from order statistics at ranks k/M: the share of values <= x (+- 1/M)."""
    q = np.asarray(q, dtype=float)
    if len(q) == 0:
        return float("nan")
    return np.searchsorted(q, x, side="right") / len(q)


def summary_table(rt: pd.DataFrame, metrics=("resolve_ns", "rtt_ns", "handshake_ns", "ratio"),
                  by=("protocol",)) -> pd.DataFrame:
    """Medians and means per group from load.response_times (durations in ms, ratio
    unitless), protocols in the study's order."""
    rows = []
    for key, g in rt.groupby(list(by), sort=False):
        if len(g) != 1:
            raise ValueError(f"summary_table: {len(g)} rows for {key}; group response_times by {by}")
        r = g.iloc[0]
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        for m in metrics:
            scale = 1.0 if m == "ratio" else NS_PER_MS
            unit = "" if m == "ratio" else " [ms]"
            label = m.replace("_ns", "")
            row[f"{label} n"] = int(r[f"{m}_n"])
            row[f"{label} median{unit}"] = (r[f"{m}_median"] / scale) if r[f"{m}_n"] else np.nan
            row[f"{label} mean{unit}"] = (r[f"{m}_mean"] / scale) if r[f"{m}_n"] else np.nan
        rows.append(row)
    out = pd.DataFrame(rows)
    if "protocol" in out:
        order = {p: i for i, p in enumerate(names.PROTOCOLS)}
        out = out.sort_values("protocol", key=lambda s: s.map(order)).reset_index(drop=True)
        out["protocol"] = out["protocol"].map(names.PROTOCOL_LABELS).fillna(out["protocol"])
    return out


PEER_METRICS = ("handshake_ns", "resolve_ns", "ratio")


def peer_table(prt: pd.DataFrame, peers: pd.DataFrame, phase: str = "measured", mode: str = "fresh") -> pd.DataFrame:
    """Third-party DoQ servers of the testbed: per address (load.testbed_peers: peer
    software, class), vantage point and protocol, the median handshake and resolve time
    (ms) and handshake-to-RTT ratio of one phase and connection mode, from
    load.peer_response_times (its ratios: load.response_times'). Addresses in the order
    of `peers`, protocols in the study's order; empty when there are no rows."""
    if prt.empty:
        return pd.DataFrame()
    d = prt[(prt["phase"] == phase) & (prt["mode"] == mode)]
    if d.empty:
        return pd.DataFrame()
    t = summary_table(d, metrics=PEER_METRICS, by=("address", "vantage_id", "protocol"))
    pos = {a: i for i, a in enumerate(peers["address"])}
    t = t.assign(_pos=t["address"].map(pos)).sort_values(["_pos", "vantage_id"], kind="stable")
    t = t.merge(peers, on="address", how="left", sort=False)
    cols = ["address", "peer", "class", "vantage_id", "protocol", "resolve n", "handshake median [ms]",
            "resolve median [ms]", "ratio median"]
    return t[cols].rename(columns={"resolve n": "queries"}).reset_index(drop=True)


def pair_ratio(handshakes: pd.DataFrame, rtts: pd.DataFrame) -> pd.DataFrame:
    """Handshake-to-RTT ratio for raw rows (small data; load.response_times does the same
    in SQL): each handshake is paired with the median of the answered RTT samples of the
    same campaign, address, port and the transport its protocol uses.

    handshakes: campaign_id, address, protocol, port, handshake_ns (+ any columns)
    rtts: campaign_id, address, transport, port, rtt_ns, status"""
    ok = rtts[(rtts["status"] == "ok") & rtts["rtt_ns"].notna() & (rtts["rtt_ns"] > 0)]
    med = (ok.groupby(["campaign_id", "address", "transport", "port"], as_index=False)["rtt_ns"]
             .median())
    h = handshakes.copy()
    h["transport"] = h["protocol"].map(names.PROTOCOL_TRANSPORT)
    out = h.merge(med, on=["campaign_id", "address", "transport", "port"], how="inner")
    out["ratio"] = out["handshake_ns"].astype(float) / out["rtt_ns"].astype(float)
    return out


def dox_set(answers: pd.DataFrame, protocols=names.DOX_PROTOCOLS) -> set:
    """Addresses that answered on every protocol in `protocols` (raw rows: address,
    protocol)."""
    per = answers[answers["protocol"].isin(protocols)].groupby("address")["protocol"].nunique()
    return set(per[per == len(protocols)].index)


def churn(members: pd.DataFrame) -> pd.DataFrame:
    """Week-over-week churn from load.membership_by_week: new (not in the previous week),
    gone (in the previous week, not in this one), retention from the previous week and
    from the first week (share of the first week's resolvers still there). No weeks: an
    empty frame with those columns."""
    df = members.sort_values("week_index").reset_index(drop=True).copy()
    if df.empty:
        return df.reindex(columns=list(df.columns) + ["new", "gone", "retention_previous", "retention_first"])
    prev_total = df["total"].shift(1)
    first_total = df["total"].iloc[0] if len(df) else np.nan
    df["new"] = df["total"] - df["kept_from_previous"]
    df.loc[0, "new"] = np.nan if len(df) else None
    df["gone"] = prev_total - df["kept_from_previous"]
    df["retention_previous"] = df["kept_from_previous"] / prev_total
    df["retention_first"] = df["kept_from_first"] / first_total
    return df


def retention_first_to_last(members: pd.DataFrame) -> float:
    """Share of the first week's resolvers that are still in the set in the last week."""
    c = churn(members)
    return float(c["retention_first"].iloc[-1]) if len(c) else float("nan")


def pivot_weeks(df: pd.DataFrame, column: str, value: str = "resolvers") -> pd.DataFrame:
    """Weeks as rows, `column`'s values as columns (largest total first), zeros filled."""
    p = df.pivot_table(index="iso_week", columns=column, values=value, aggfunc="sum", fill_value=0)
    return p[p.sum().sort_values(ascending=False).index]


def cause_shares(causes: pd.DataFrame, by=("implementation",)) -> pd.DataFrame:
    """DoQ handshake causes as shares per group (rows: groups, columns: causes)."""
    p = causes.pivot_table(index=list(by), columns="cause", values="handshakes", aggfunc="sum", fill_value=0)
    return p.div(p.sum(axis=1), axis=0)


def figure_rows(rt: pd.DataFrame, vantage=None, phase: str = "measured", mode: str = "fresh",
                key_share: str | None = None, dox: bool | None = True) -> pd.DataFrame:
    """The rows of load.response_times that one figure draws: one per protocol. Where a
    protocol was measured with several key shares, `key_share` picks one (default: the
    one with most measurements)."""
    d = rt
    if vantage is not None and "vantage_id" in d:
        d = d[d["vantage_id"] == vantage]
    if phase is not None and "phase" in d:
        d = d[d["phase"] == phase]
    if mode is not None and "mode" in d:
        d = d[d["mode"] == mode]
    if dox is not None and "dox" in d:
        d = d[d["dox"] == dox]
    if "key_share" in d:
        keep = []
        for _proto, g in d.groupby("protocol", sort=False):
            if g["key_share"].nunique() > 1:
                ks = key_share if key_share in set(g["key_share"]) else g.sort_values("n").iloc[-1]["key_share"]
                g = g[g["key_share"] == ks]
            keep.append(g)
        d = pd.concat(keep) if keep else d
    return d.reset_index(drop=True)


def quantile_table(rt: pd.DataFrame, metrics=("resolve_ns", "rtt_ns", "handshake_ns", "ratio")) -> pd.DataFrame:
    """Every distribution of load.response_times as a table to save beside the figures:
    one row per group and metric with its values, mean, median and the exact order
    statistics the ECDFs draw (`q`: space-separated, rank k/len at position k); `resolvers`:
    the resolvers the group's measurements come from (the figures' n per line)."""
    groups = [c for c in ("vantage_id", "protocol", "phase", "mode", "key_share", "dox") if c in rt]
    extra = ["resolvers"] if "resolvers" in rt else []
    rows = []
    for r in rt.itertuples(index=False):
        for m in metrics:
            q = getattr(r, f"{m}_q")
            rows.append({**{g: getattr(r, g) for g in groups}, **{e: getattr(r, e) for e in extra},
                         "metric": m, "n": getattr(r, f"{m}_n"),
                         "mean": getattr(r, f"{m}_mean"), "median": getattr(r, f"{m}_median"),
                         "q": " ".join(repr(float(x)) for x in q)})
    return pd.DataFrame(rows, columns=groups + extra + ["metric", "n", "mean", "median", "q"])


def round_trip_shares(classes: pd.DataFrame) -> pd.DataFrame:
    """load.ratio_classes as shares per (vantage, protocol, phase, mode): columns are
    round trips 1..N (the last one means N or more)."""
    p = classes.pivot_table(index=["vantage_id", "protocol", "phase", "mode"], columns="round_trips",
                            values="measurements", aggfunc="sum", fill_value=0)
    return p.div(p.sum(axis=1), axis=0)


def round_trip_shares_from(rt: pd.DataFrame, by=("vantage_id", "protocol", "phase", "mode")) -> pd.DataFrame:
    """Shares of handshakes per whole number of round trips from load.response_times'
    round_trips_k columns, summed over the other group columns (rows: `by`, columns: k).
    Empty when there are no measurements (a source without a performance database)."""
    if rt.empty or not set(by) <= set(rt.columns):
        return pd.DataFrame()
    cols = [c for c in rt.columns if c.startswith("round_trips_")]
    p = rt.groupby(list(by))[cols].sum()
    p.columns = [int(c.rsplit("_", 1)[1]) for c in cols]
    p = p[p.sum(axis=1) > 0]
    return p.div(p.sum(axis=1), axis=0)


VANTAGE_METRICS = ("resolve_ns", "handshake_ns", "rtt_ns")


def common_resolvers(per: pd.DataFrame) -> dict[str, set]:
    """Per protocol, the resolvers (addresses) of load.per_resolver_medians answered from
    every vantage point in the frame."""
    vps = set(per["vantage_id"])
    out = {}
    for proto, g in per.groupby("protocol", sort=False):
        seen = g.groupby("address")["vantage_id"].nunique()
        out[proto] = set(seen[seen == len(vps)].index)
    return out


def vantage_comparison(per: pd.DataFrame, reference: str | None = None) -> pd.DataFrame:
    """Vantage points side by side, per protocol, from load.per_resolver_medians.

    resolvers: resolvers that answered from this vantage point; common_resolvers: those
    that answered from every vantage point. Each metric is compared on the same
    resolvers from each place: those of the common ones that have a value for it from
    every vantage point (rtt_resolvers of them for the RTT: an RTT probe may go
    unanswered from one place and not from another). Over them: the median over
    resolvers of their median resolve time, handshake time and RTT (ms), and the median
    over resolvers of the per-resolver difference to the `reference` vantage point
    (default: the first one by id): what being elsewhere adds to a query to the same
    resolver. Protocols in the study's order."""
    cols = ["vantage_id", "protocol", "resolvers", "common_resolvers", "rtt_resolvers",
            "resolve_median_ms", "handshake_median_ms", "rtt_median_ms",
            "reference", "resolve_delta_ms", "rtt_delta_ms"]
    if per.empty:
        return pd.DataFrame(columns=cols)
    vps = sorted(per["vantage_id"].unique())
    ref = reference if reference in vps else vps[0]
    common = common_resolvers(per)
    rows = []
    order = {p: i for i, p in enumerate(names.PROTOCOLS)}
    for proto in sorted(per["protocol"].unique(), key=lambda p: order.get(p, 99)):
        g = per[per["protocol"] == proto]
        c = g[g["address"].isin(common[proto])]
        # per metric: resolvers as rows, vantage points as columns, only complete rows
        wide = {m: c.pivot(index="address", columns="vantage_id", values=m).reindex(columns=vps).dropna()
                for m in VANTAGE_METRICS}
        for vp in vps:
            row = {"vantage_id": vp, "protocol": proto,
                   "resolvers": int(g[g["vantage_id"] == vp]["address"].nunique()),
                   "common_resolvers": len(common[proto]), "rtt_resolvers": len(wide["rtt_ns"]),
                   "reference": ref}
            for m in VANTAGE_METRICS:
                w = wide[m]
                row[m.replace("_ns", "_median_ms")] = float(w[vp].median()) / NS_PER_MS if len(w) else np.nan
            for m in ("resolve_ns", "rtt_ns"):
                w = wide[m]
                row[m.replace("_ns", "_delta_ms")] = (float((w[vp] - w[ref]).median()) / NS_PER_MS
                                                      if len(w) else np.nan)
            rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def ports_not_recorded_note(unk: pd.DataFrame) -> str:
    """A sentence for load.ports_not_recorded: how many verified resolvers have no
    recorded port, in which weeks, and that the port shares leave them out."""
    if unk.empty:
        return ""
    weeks = list(unk["iso_week"])
    span = weeks[0] if len(weeks) == 1 else f"{weeks[0]} to {weeks[-1]}"
    n, tot = int(unk["not_recorded"].sum()), int(unk["total"].sum())
    return (f"**Port not recorded**: the source did not record on which port {n} of the {tot} "
            f"verified resolver-weeks of {span} ({len(weeks)} weeks) answered DoQ (its verifier tried 784, "
            f"then 8853, and kept only the address). The port shares above leave them out; the table "
            f"below says on which ports the same week's scan saw them, not where they verified.")


def side_by_side(rt: pd.DataFrame, metrics=("resolve_ns", "handshake_ns", "rtt_ns", "ratio")) -> pd.DataFrame:
    """Every vantage point's medians (figure_rows: DoX, measured, fresh) next to each
    other: one row per protocol, columns (metric, vantage_id); durations in ms. Puts an
    imported source beside a testbed or production vantage point."""
    parts = []
    for vp in sorted(rt["vantage_id"].unique()) if len(rt) else []:
        rows = figure_rows(rt, vantage=vp)
        if rows.empty:
            continue
        t = summary_table(rows, metrics=metrics)
        keep = {"protocol": "protocol"}
        for m in metrics:
            label = m.replace("_ns", "")
            unit = "" if m == "ratio" else " [ms]"
            keep[f"{label} median{unit}"] = f"{label} median{unit}"
        t = t[list(keep)].set_index("protocol")
        t.columns = pd.MultiIndex.from_tuples([(c, vp) for c in t.columns])
        parts.append(t)
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, axis=1)
    return out[sorted(out.columns, key=lambda c: ([m.replace("_ns", "") for m in metrics].index(c[0].split(" ")[0]), c[1]))]


def top_note(df: pd.DataFrame, column: str, other: str = "other") -> str:
    """What a top-N breakdown (e.g. load.top_providers) shows, from the rows themselves:
    'top 8; the rest as other' when some were folded into `other`, else 'all 7'."""
    shown = sorted(set(df[column]) - {other}) if len(df) else []
    if len(df) and other in set(df[column]):
        return f"top {len(shown)}; the rest as {other}"
    return f"all {len(shown)}"
