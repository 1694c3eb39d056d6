"""Tables of dnsbench runs (load.bench_runs): the loss sweep on the simulated internet
(the UDP/DoT/DoQ field report's three tables: QPS, mean resolve time of the answered
queries, success rate; one row per server, protocol and policy, one column per loss
level) and the connection-reuse comparison (cold query latency per protocol and policy
on the same path).

A run belongs to a series: its label without the " loss=P%" the sweep adds
(load.bench_runs' `series`). A loss sweep is a series of runs with a path loss; a policy
comparison a series without one in which a target ran under more than one policy.
Unless a series is named, the tables show the newest of its kind. When a series holds
several runs of one cell (the same target, policy and loss), the newest counts.
"""

from __future__ import annotations

import pandas as pd

from . import names

# The sweep tables' metrics: bench_runs column -> title (the order and titles of
# dnsbench.WriteSweepTables).
SWEEP_METRICS = {
    "qps": "Queries per second (answered)",
    "latency_mean_ms": "Mean resolve time of answered queries (ms)",
    "success_rate": "Success rate (answered / sent)",
}
# Leading columns of every table; the rest are loss levels or policies.
KEY_COLUMNS = ["server", "target", "protocol", "policy"]
REUSE_KEYS = ["server", "target", "protocol"]
REUSE_METRICS = {"total_mean_ms": "mean ms", "total_p50_ms": "p50 ms", "success_rate": "success"}


def loss_label(loss: float) -> str:
    """A loss probability as dnsbench.FormatLoss writes it: 0.05 -> '5%'."""
    return f"{100 * float(loss):.4g}%"


def server_names(addresses, peers: pd.DataFrame | None = None) -> dict[str, str]:
    """address -> 'dnsproxy 198.19.3.7' for the testbed's third-party servers
    (load.testbed_peers), the bare address for any other."""
    kind = {}
    if peers is not None and len(peers):
        kind = dict(zip(peers["address"].astype(str), peers["peer"]))
    return {a: f"{kind[a]} {a}" if a in kind else a for a in dict.fromkeys(map(str, addresses))}


def series(runs: pd.DataFrame) -> pd.DataFrame:
    """The series of stored runs, oldest first: series, kind ('loss sweep' when its runs
    carry a path loss, 'policy comparison' when a target ran under several policies,
    else 'runs'), first, last (start times), runs, targets, policies, levels (loss
    levels, 0 outside a sweep)."""
    cols = ["series", "kind", "first", "last", "runs", "targets", "policies", "levels"]
    if runs.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for name, g in runs.groupby("series", sort=False):
        sweep = g[g["path_loss"].notna()]
        flat = g[g["path_loss"].isna()]
        if len(sweep):
            rows.append((name, "loss sweep", sweep["started_at"].min(), sweep["started_at"].max(), len(sweep),
                         sweep["target"].nunique(), sweep["policy"].nunique(), sweep["path_loss"].nunique()))
        if len(flat):
            multi = (flat.groupby("target")["policy"].nunique() > 1).any()
            rows.append((name, "policy comparison" if multi else "runs", flat["started_at"].min(),
                         flat["started_at"].max(), len(flat), flat["target"].nunique(),
                         flat["policy"].nunique(), 0))
    return pd.DataFrame(rows, columns=cols).sort_values("last", kind="stable").reset_index(drop=True)


def _pick(runs: pd.DataFrame, kind: str, name: str | None) -> str | None:
    s = series(runs)
    s = s[s["kind"] == kind]
    if name is not None:
        return name if (s["series"] == name).any() else None
    return s["series"].iloc[-1] if len(s) else None


def _order(df: pd.DataFrame, servers: dict[str, str]) -> pd.DataFrame:
    """Rows by server (first run first), protocol (names.PROTOCOLS), variant, policy."""
    proto = {p: i for i, p in enumerate(names.PROTOCOLS)}
    pol = {p: i for i, p in enumerate(names.POLICIES)}
    srv = {a: i for i, a in enumerate(servers)}
    key = pd.DataFrame({"s": df["address"].map(srv), "p": df["protocol"].map(lambda p: proto.get(p, 99)),
                        "v": df["variant"], "o": df["policy"].map(lambda p: pol.get(p, 99))}, index=df.index)
    return df.loc[key.sort_values(["s", "p", "v", "o"], kind="stable").index]


def _newest(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return df.sort_values(["started_at", "bench_id"], kind="stable").drop_duplicates(keys, keep="last")


def sweep_frame(runs: pd.DataFrame, name: str | None = None, peers: pd.DataFrame | None = None) -> pd.DataFrame:
    """The runs of one loss sweep (the newest unless `name` names its series), one per
    target, policy and loss level (the newest of repeated ones), with a `server` column
    (server_names) and `loss` (its label, '5%'); rows ordered by server, protocol,
    policy, loss. Empty when no sweep is stored."""
    pick = _pick(runs, "loss sweep", name)
    if pick is None:
        return runs.iloc[0:0].assign(server=pd.Series(dtype=str), loss=pd.Series(dtype=str))
    df = runs[(runs["series"] == pick) & runs["path_loss"].notna()]
    df = _newest(df, ["target", "policy", "path_loss"]).sort_values("path_loss", kind="stable")
    servers = server_names(runs[runs["series"] == pick]["address"], peers)
    df = _order(df, servers)
    return df.assign(server=df["address"].map(servers), loss=df["path_loss"].map(loss_label)).reset_index(drop=True)


def sweep_table(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One of the field report's tables from sweep_frame: columns server, target,
    protocol, policy, then one per loss level in increasing order ('0%', '5%', ...),
    holding `metric` (a SWEEP_METRICS key); NaN where a level has no run (or, for the
    mean latency, no answer)."""
    if metric not in SWEEP_METRICS:
        raise ValueError(f"metric {metric!r}: want one of {', '.join(SWEEP_METRICS)}")
    if frame.empty:
        return pd.DataFrame(columns=KEY_COLUMNS)
    levels = [loss_label(x) for x in sorted(frame["path_loss"].unique())]
    rows = frame.drop_duplicates(KEY_COLUMNS)[KEY_COLUMNS]
    wide = frame.set_index(KEY_COLUMNS + ["loss"])[metric].astype(float).unstack("loss")
    out = rows.merge(wide.reset_index(), on=KEY_COLUMNS, how="left")
    for lv in levels:
        if lv not in out:
            out[lv] = float("nan")
    out = out[KEY_COLUMNS + levels].reset_index(drop=True)
    out.columns.name = None
    return out


# The unit of each SWEEP_METRICS value, as the CSV column's last word (plots.UNITS).
SWEEP_UNITS = {"qps": "qps", "latency_mean_ms": "ms", "success_rate": "rate"}


def sweep_csv(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """sweep_table's table with its loss levels named for the CSV: 'loss <level> <unit
    of metric>' ('5%' of the QPS table -> 'loss 5% qps', written loss_5pct_qps), so that
    each column's name ends in its values' unit."""
    unit = SWEEP_UNITS[metric]
    return table.rename(columns={c: f"loss {c} {unit}" for c in table.columns if c not in KEY_COLUMNS})


def sweep_tables(runs: pd.DataFrame, name: str | None = None, peers: pd.DataFrame | None = None
                 ) -> dict[str, pd.DataFrame]:
    """The three tables of a loss sweep (sweep_table for every SWEEP_METRICS key)."""
    frame = sweep_frame(runs, name, peers)
    return {m: sweep_table(frame, m) for m in SWEEP_METRICS}


def reuse_table(runs: pd.DataFrame, name: str | None = None, peers: pd.DataFrame | None = None) -> pd.DataFrame:
    """The connection-reuse comparison (the newest policy comparison unless `name` names
    its series): one row per server and target, and for each policy run (in
    names.POLICIES order) its total query latency from issue to answer, session set-up
    included ('<policy> mean ms', '<policy> p50 ms': the cold query latency of a new
    session under 'fresh') and its success rate ('<policy> success'). Empty when no
    comparison is stored."""
    pick = _pick(runs, "policy comparison", name)
    if pick is None:
        return pd.DataFrame(columns=REUSE_KEYS)
    df = runs[(runs["series"] == pick) & runs["path_loss"].isna()]
    df = _newest(df, ["target", "policy"])
    servers = server_names(df["address"], peers)
    df = _order(df, servers).assign(server=lambda d: d["address"].map(servers))
    pol = {p: i for i, p in enumerate(names.POLICIES)}
    policies = sorted(df["policy"].unique(), key=lambda p: pol.get(p, 99))
    out = df.drop_duplicates(REUSE_KEYS)[REUSE_KEYS].reset_index(drop=True)
    for p in policies:
        part = df[df["policy"] == p].set_index("target")
        for col, suffix in REUSE_METRICS.items():
            out[f"{p} {suffix}"] = out["target"].map(part[col]).astype(float)
    return out


def markdown(table: pd.DataFrame, metric: str | None = None, digits: int = 2) -> str:
    """A table as Markdown, numbers formatted as dnsbench prints them: success rates
    (a 'success' column, or metric 'success_rate') as percentages, QPS with one
    decimal, milliseconds with `digits`; '-' where there is no value."""
    if table.empty:
        return "(no rows)"

    def fmt(col: str, v) -> str:
        if col in KEY_COLUMNS or not isinstance(v, (int, float)):
            return str(v)
        if pd.isna(v):
            return "-"
        if metric == "success_rate" or col.endswith("success"):
            return f"{100 * v:.2f}%"
        if metric == "qps":
            return f"{v:.1f}"
        return f"{v:.{digits}f}"

    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(c, v) for c, v in zip(cols, row)) + " |")
    return "\n".join(lines)
