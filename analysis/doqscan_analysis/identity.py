"""What each DoQ resolver is, beyond where it is and how fast it answers: its QUIC library
(quic_stacks, from verify), the encrypted resolvers plain DNS servers designate (DDR,
RFC 9462: ddr_queries, ddr_designations, from verify), what its server allows one
connection (connection_policies, from the weekly conncheck) and how its DoQ handshake
meets the anti-amplification limit for each client Initial size and key share
(amplification_probes).

Loaders take a connection from load.connect and the usual filters (weeks, vantages: None
for all): a PostgreSQL connection, or a release (lake.Lake, DuckDB or Spark), whose
functions of the same name in lake.py give the same rows (empty frames with the same
columns from a release without these tables); the figures are matplotlib Figures for
plots.publish.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from . import names, plots
from .source import _frame, _on_lake, _params

# Ports a scan probes for DoQ (docs/zprobe.md); a designated endpoint elsewhere is only
# found through DDR.
SCANNED_PORTS = (784, 853, 8853)

NOT_IDENTIFIED = "not identified"

# ALPNs that offer DoQ: RFC 9250's, the drafts' and AdGuard's pre-draft one (names.alpn_name).
DOQ_ALPNS = ("doq", "doq-i11", "doq-i10", "doq-i09", "doq-i08", "doq-i07", "doq-i06", "doq-i05", "doq-i04", "doq-i03",
             "doq-i02", "doq-i01", "doq-i00", "dq")


@_on_lake
def libraries_by_week(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """DoQ-verified resolvers per ISO week and QUIC library: the quic_stacks label of
    the resolver's preferred port (853, then 784, then 8853, then any), 'unknown' where
    the evidence fit no single library, NOT_IDENTIFIED where verify stored none (a run
    with identification off, or an import). A resolver (address) counts once per week.
    Columns iso_week, library, resolvers."""
    return _frame(conn, """
        WITH v AS (
            SELECT DISTINCT ON (vr.iso_week, r.address) vr.iso_week, r.address, r.run_id, r.port
              FROM verification_results r JOIN verification_runs vr USING (run_id)
             WHERE r.outcome = 'doq-verified'
               AND (%(weeks)s::text[] IS NULL OR vr.iso_week = ANY(%(weeks)s::text[]))
               AND (%(vantages)s::text[] IS NULL OR vr.vantage_id = ANY(%(vantages)s::text[]))
             ORDER BY vr.iso_week, r.address, """ + names.sql_port_rank("r.port") + """, r.port, vr.vantage_id)
        SELECT v.iso_week, coalesce(q.library, %(none)s) AS library, count(*) AS resolvers
          FROM v LEFT JOIN quic_stacks q USING (run_id, address, port)
         GROUP BY 1, 2 ORDER BY 1, 2""", _params(weeks, vantages, none=NOT_IDENTIFIED))


def libraries_figure(df: pd.DataFrame):
    """Stacked bars: resolvers per week by QUIC library."""
    pivot = df.pivot_table(index="iso_week", columns="library", values="resolvers", aggfunc="sum", fill_value=0)
    order = [c for c in pivot.columns if c not in ("unknown", NOT_IDENTIFIED)] + \
        [c for c in ("unknown", NOT_IDENTIFIED) if c in pivot.columns]
    return plots.stacked_weeks(pivot[order] if len(pivot.columns) else pivot,
                               "DoQ-verified resolvers per week by QUIC library", "DoQ-verified resolvers",
                               legend_title="QUIC library")


@_on_lake
def ddr_queries(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """DNS/53 responders asked for _dns.resolver.arpa SVCB per week and answer status
    (designations, none, nxdomain, refused, dns-error, timeout, bad-response, error).
    Columns iso_week, status, responders."""
    return _frame(conn, """
        SELECT vr.iso_week, q.status, count(DISTINCT q.address) AS responders
          FROM ddr_queries q JOIN verification_runs vr USING (run_id)
         WHERE (%(weeks)s::text[] IS NULL OR vr.iso_week = ANY(%(weeks)s::text[]))
           AND (%(vantages)s::text[] IS NULL OR vr.vantage_id = ANY(%(vantages)s::text[]))
         GROUP BY 1, 2 ORDER BY 1, 2""", _params(weeks, vantages))


@_on_lake
def ddr_endpoints(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """Every designated DoQ endpoint (a designation offering a DoQ ALPN: each address
    hint on its port, 853 without one), with the responders that name it, whether the
    week's scan found it too (a QUIC Version Negotiation reply on that address and
    port) and how verify classified it in the same run. Columns iso_week, address, port,
    designated_by (responders), scanned (bool), outcome (None: not verified, e.g.
    blocklisted), port_class ('scanned port' or 'other port')."""
    df = _frame(conn, """
        WITH d AS (
            SELECT vr.iso_week, vr.run_id, vr.scan_id, h.hint AS address, coalesce(g.port, 853) AS port, g.resolver
              FROM ddr_designations g JOIN verification_runs vr USING (run_id)
              CROSS JOIN LATERAL unnest(g.ipv4hints || g.ipv6hints) AS h(hint)
             WHERE g.alpns && %(doq)s::text[]
               AND (%(weeks)s::text[] IS NULL OR vr.iso_week = ANY(%(weeks)s::text[]))
               AND (%(vantages)s::text[] IS NULL OR vr.vantage_id = ANY(%(vantages)s::text[])))
        SELECT d.iso_week, host(d.address) AS address, d.port, count(DISTINCT d.resolver) AS designated_by,
               bool_or(EXISTS (SELECT 1 FROM scan_replies s WHERE s.scan_id = d.scan_id AND s.address = d.address
                               AND s.port = d.port AND s.reply_kind = 'quic-vn')) AS scanned,
               min(r.outcome) AS outcome
          FROM d LEFT JOIN verification_results r ON r.run_id = d.run_id AND r.address = d.address AND r.port = d.port
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""", _params(weeks, vantages, doq=list(DOQ_ALPNS)))
    df["port_class"] = np.where(df["port"].isin(SCANNED_PORTS), "scanned port", "other port")
    return df


def ddr_table(endpoints: pd.DataFrame) -> pd.DataFrame:
    """Designated DoQ endpoints per week by port class, whether the scan found them too,
    and verification outcome: the resolvers DDR adds to a port scan, and the designations
    that do not answer (timeout, unreachable)."""
    if endpoints.empty:
        return pd.DataFrame(columns=["iso_week", "port_class", "scanned", "outcome", "endpoints"])
    e = endpoints.assign(outcome=endpoints["outcome"].fillna("not verified"))
    return (e.groupby(["iso_week", "port_class", "scanned", "outcome"]).size()
            .rename("endpoints").reset_index())


def _latest_policy_run_cte() -> str:
    return """
        runs AS (
            SELECT DISTINCT ON (iso_week, vantage_id) run_id, iso_week, vantage_id
              FROM policy_runs
             WHERE (%(weeks)s::text[] IS NULL OR iso_week = ANY(%(weeks)s::text[]))
               AND (%(vantages)s::text[] IS NULL OR vantage_id = ANY(%(vantages)s::text[]))
             ORDER BY iso_week, vantage_id, started_at DESC, run_id DESC)"""


@_on_lake
def policies(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """The connection policies of the newest check run of each week and vantage point:
    one row per (address, port, protocol) with connection_policies' columns."""
    return _frame(conn, "WITH" + _latest_policy_run_cte() + """
        SELECT runs.iso_week, runs.vantage_id, host(p.address) AS address, p.port, p.protocol, p.status,
               p.queries_sent, p.queries_answered, p.closed_by_server, p.close_detail,
               p.idle_advertised_ms, p.idle_alive_ms, p.idle_dead_ms, p.max_streams, p.token_issued,
               p.token_honoured, p.token_honoured_for_ms, p.token_refused_after_ms, p.retry_policy, p.zero_rtt,
               p.resumed, p.ticket_lifetime_s
          FROM connection_policies p JOIN runs USING (run_id)
         ORDER BY 1, 2, 3, 4, 5""", _params(weeks, vantages))


def _seconds(ms) -> str:
    return f"{ms / 1e3:g} s"


def token_lifetime(honoured_for_ms, refused_after_ms) -> str | None:
    """What conncheck's token ages tell of how long a server honours its NEW_TOKEN
    tokens (connection_policies.token_honoured_for_ms, token_refused_after_ms: the
    longest wait after which a token was honoured, the shortest after which it was
    not). Honoured and never refused: only a lower bound, "at least N s" (a check's
    waits end at 40 s; quic-go honours tokens for 24 h). Honoured after H and refused
    after a longer R: "H to R s". Refused after R only: "under R s" ("refused after
    0 s": not even a fresh token was honoured). Refused after a shorter wait than one
    honoured: the refusal was not the token's age, so still "at least H s", with the
    refusal named. Neither: None (unknown, never "not honoured")."""
    h = None if pd.isna(honoured_for_ms) else float(honoured_for_ms)
    r = None if pd.isna(refused_after_ms) else float(refused_after_ms)
    if h is None and r is None:
        return None
    if h is None:
        return "refused after 0 s" if r == 0 else f"under {_seconds(r)}"
    if r is None:
        return f"at least {_seconds(h)}"
    if r > h:
        return f"{h / 1e3:g} to {_seconds(r)}"
    return f"at least {_seconds(h)} (refused after {_seconds(r)}: not by age)"


def _token_lifetimes(g: pd.DataFrame) -> str | None:
    """The endpoints of g per token_lifetime label, most common first ("at least 40 s:
    2; 8 to 12 s: 1"); None where no endpoint's lifetime is known."""
    labels = [x for x in map(token_lifetime, g["token_honoured_for_ms"], g["token_refused_after_ms"]) if x is not None]
    if not labels:
        return None
    counts = pd.Series(labels).value_counts()
    return "; ".join(f"{k}: {n}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def policy_table(pol: pd.DataFrame) -> pd.DataFrame:
    """Per protocol: endpoints checked (status ok), how many servers ended a connection
    within the check's query budget and after how many queries (median), the idle
    timeouts seen (median of the longest wait still answered), NEW_TOKEN, how long
    tokens were honoured (token_lifetime's labels with their endpoints: a lower bound
    reads "at least"), Retry policy and 0-RTT counts (known values only: unknown stays
    out)."""
    ok = pol[pol["status"] == "ok"]
    rows = []
    for proto, g in ok.groupby("protocol"):
        closed = g[g["closed_by_server"] == True]  # noqa: E712 (NULL stays out)
        rows.append({
            "protocol": proto, "endpoints": len(g),
            "closed by server": len(closed),
            "queries before close (median)": closed["queries_answered"].median() if len(closed) else np.nan,
            "idle alive s (median)": g["idle_alive_ms"].median() / 1e3 if g["idle_alive_ms"].notna().any() else np.nan,
            "idle advertised s (median)": g["idle_advertised_ms"].median() / 1e3 if g["idle_advertised_ms"].notna().any() else np.nan,
            "drops idle before advertised": int(((g["idle_dead_ms"] < g["idle_advertised_ms"])).sum()),
            "NEW_TOKEN issued": int((g["token_issued"] == True).sum()),  # noqa: E712
            "token honoured / not": f"{int((g['token_honoured'] == True).sum())} / {int((g['token_honoured'] == False).sum())}",  # noqa: E712
            "token honoured for (endpoints)": _token_lifetimes(g),
            "Retry never/first/always": "/".join(str(int((g["retry_policy"] == k).sum())) for k in ("never", "first", "always")),
            "0-RTT accepted": int((g["zero_rtt"] == True).sum()),  # noqa: E712
            "resumed": int((g["resumed"] == True).sum()),  # noqa: E712
            "ticket lifetime h (median)": g["ticket_lifetime_s"].median() / 3600 if g["ticket_lifetime_s"].notna().any() else np.nan,
        })
    return pd.DataFrame(rows)


@_on_lake
def cold_and_warm(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """Per resolver address and protocol (DoQ, DoT, DoH), the median cold query of the
    hourly rounds (a measured query on a fresh connection: handshake + resolve) and the
    median warm one (resolve alone, what a query on a kept connection costs), in ms.
    Columns address, protocol, cold_ms, warm_ms, queries."""
    return _frame(conn, """
        SELECT host(m.address) AS address, m.protocol,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY (m.handshake_ns + m.resolve_ns) / 1e6) AS cold_ms,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY m.resolve_ns / 1e6) AS warm_ms,
               count(*) AS queries
          FROM measurements m JOIN campaigns c USING (campaign_id)
         WHERE m.status = 'ok' AND m.rcode IS NOT NULL AND m.phase = 'measured' AND m.mode = 'fresh' AND m.protocol IN """ + names.sql_list(names.COLD_WARM_PROTOCOLS) + """
           AND m.handshake_ns IS NOT NULL AND m.resolve_ns IS NOT NULL
           AND (%(weeks)s::text[] IS NULL OR to_char(c.round_hour, 'IYYY-"W"IW') = ANY(%(weeks)s::text[]))
           AND (%(vantages)s::text[] IS NULL OR c.vantage_id = ANY(%(vantages)s::text[]))
         GROUP BY 1, 2""", _params(weeks, vantages))


# Query intervals of a forwarder keeping one connection to its upstream (s).
FORWARDER_INTERVALS = (1, 10, 60)


def forwarder_cost(pol: pd.DataFrame, cw: pd.DataFrame, intervals=FORWARDER_INTERVALS) -> pd.DataFrame:
    """What a forwarder that keeps one connection to each resolver pays per query when its
    queries come every I seconds (the Blocky and DoT-forwarder field reports): a query
    costs the warm time while the connection lives, the cold one when the server has
    dropped it. It is dropped when I reaches the idle wait the server did not survive
    (idle_dead), and every N-th query reconnects when the server ends a connection after
    N queries. Per protocol: resolvers with both a policy and hourly measurements, the
    median cold and warm query, and per interval the median expected cost and the share
    of resolvers for which the kept connection pays nothing off (every query cold).
    An interval the check could not decide (between the longest wait answered and the
    check's longest wait) counts as kept: the cost is a lower bound there."""
    if pol.empty or cw.empty:
        return pd.DataFrame()
    p = pol[pol["status"] == "ok"].copy()
    m = p.merge(cw, on=["address", "protocol"], how="inner")
    rows = []
    for proto, g in m.groupby("protocol"):
        row = {"protocol": proto, "resolvers": g["address"].nunique(),
               "cold ms (median)": g["cold_ms"].median(), "warm ms (median)": g["warm_ms"].median()}
        for i in intervals:
            dead = g["idle_dead_ms"].notna() & (g["idle_dead_ms"] <= i * 1e3)
            per_conn = np.where((g["closed_by_server"] == True) & (g["queries_answered"] > 0),  # noqa: E712
                                1.0 / g["queries_answered"].clip(lower=1), 0.0)
            p_cold = np.where(dead, 1.0, per_conn)
            cost = g["warm_ms"] + p_cold * (g["cold_ms"] - g["warm_ms"])
            row[f"every {i}s: ms/query (median)"] = float(np.median(cost))
            row[f"every {i}s: all cold"] = f"{100 * dead.mean():.0f}%"
        rows.append(row)
    return pd.DataFrame(rows)


@_on_lake
def amplification(conn, weeks=None, vantages=None) -> pd.DataFrame:
    """The amplification handshakes of the newest check run of each week and vantage
    point whose handshake was explained: one row per (address, port, Initial size, key
    share) with chain_bytes, client_bytes, server_bytes_pre_ack, budget, stalled,
    round_trips, retry_seen."""
    return _frame(conn, "WITH" + _latest_policy_run_cte() + """
        SELECT runs.iso_week, runs.vantage_id, host(a.address) AS address, a.port, a.initial_size, a.key_share,
               a.chain_bytes, a.chain_certs, a.client_bytes, a.server_bytes_pre_ack, a.budget, a.stalled,
               a.stall_ns, a.round_trips, a.cause, a.retry_seen
          FROM amplification_probes a JOIN runs USING (run_id)
         WHERE a.stalled IS NOT NULL
         ORDER BY 1, 2, 3, 4, 6, 5""", _params(weeks, vantages))


# Chain sizes (DER bytes of the certificates sent) the figure groups by: a chain under
# 2.5 KB never meets the limit, one over 9 KB always does at 3x a 1,452-byte hybrid
# ClientHello; the bins between are where the client's configuration decides.
CHAIN_BINS = [0, 2500, 4000, 5500, 7000, 9000, np.inf]
CHAIN_LABELS = ["< 2.5 KB", "2.5-4 KB", "4-5.5 KB", "5.5-7 KB", "7-9 KB", "> 9 KB"]


def amplification_cells(amp: pd.DataFrame) -> pd.DataFrame:
    """Stall probability and extra round trips per (chain size bin, key share, Initial
    size): handshakes, stalled share, mean round trips beyond one (a Retry's round trip
    left out). Handshakes whose chain size is unknown (a check from a targets file) are
    left out."""
    a = amp[amp["chain_bytes"].notna()].copy()
    if a.empty:
        return pd.DataFrame(columns=["chain", "key_share", "initial_size", "handshakes", "stall_share", "extra_rtts"])
    a["chain"] = pd.cut(a["chain_bytes"].astype(float), CHAIN_BINS, labels=CHAIN_LABELS, right=False)
    a["extra"] = a["round_trips"] - 1 - a["retry_seen"].fillna(False).astype(int)
    out = (a.groupby(["chain", "key_share", "initial_size"], observed=True)
           .agg(handshakes=("stalled", "size"), stall_share=("stalled", "mean"), extra_rtts=("extra", "mean"))
           .reset_index())
    out["chain"] = out["chain"].astype(str)
    return out


def amplification_figure(cells: pd.DataFrame):
    """Two rows (stall probability, extra round trips) by chain size, a panel per key
    share, a line per client Initial size. Extra round trips count every cause but a
    Retry (Version Negotiation and loss too)."""
    shares = sorted(cells["key_share"].unique()) if len(cells) else ["x25519", "x25519mlkem768"]
    fig, axes = plt.subplots(2, len(shares), figsize=(5.5 * len(shares), 7), sharex=True, squeeze=False)
    for j, ks in enumerate(shares):
        c = cells[cells["key_share"] == ks]
        for k, (size, g) in enumerate(c.groupby("initial_size")):
            n = int(g["handshakes"].sum())
            g = g.set_index("chain").reindex([lab for lab in CHAIN_LABELS if lab in set(c["chain"])])
            x = np.arange(len(g))
            # Sizes often coincide (a quic-go server sends whole datagrams: 1,350 and
            # 1,452 get the same): distinct dashes and markers keep every line visible.
            style = dict(linestyle=("-", "--", ":")[k % 3], marker="os^"[k % 3], markersize=8 - 2 * (k % 3),
                         label=f"Initial {size} B ({plots.fmt_n(n)} handshakes)")
            axes[0][j].plot(x, g["stall_share"], **style)
            axes[1][j].plot(x, g["extra_rtts"], **style)
            for ax in (axes[0][j], axes[1][j]):
                ax.set_xticks(x, g.index, rotation=30, ha="right")
        axes[0][j].set_title(f"key share {ks}")
        axes[0][j].set_ylim(-0.05, 1.05)
        axes[0][j].set_ylabel("stall probability")
        axes[1][j].set_ylabel("extra round trips (mean)")
        axes[1][j].set_xlabel("certificate chain sent (DER bytes)")
        if c.empty:
            plots._empty(axes[0][j], "no amplification handshakes")
    for ax in axes[0]:  # each panel's own lines and their n
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", frameon=True, framealpha=0.9, fontsize=8)
    fig.suptitle("The anti-amplification limit: stalls by chain size and client configuration")
    fig.tight_layout()
    return fig
