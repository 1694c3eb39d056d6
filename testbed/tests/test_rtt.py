"""Round trips of every path profile, measured with ping(8) and a plain TCP connect from
the vantage namespace, against the population's rtt/jitter."""

from __future__ import annotations

import statistics

import pytest

from doqscan_analysis import population

POP = population.load()
PING_COUNT = 10
CONNECT_COUNT = 5
EARLY_MS = 0.5  # the delay line must never deliver early by more than this
# The minimum of the samples estimates the path: load (other helpers compiling on the
# same 2 cores) only ever adds delay, to the user-space delay line and to the clients,
# and it inflated medians by up to 10 ms in one of five runs. So: the minimum must be
# within [rtt - 0.5 ms, rtt + 2 ms + 1%] (+- 2 x jitter); the median only has to rule out
# gross errors (a delay applied twice, a path swapped): below rtt + 10 ms + 10%.
MIN_LATE_MS, MIN_LATE_FRACTION = 2.0, 0.01
MEDIAN_LATE_MS, MEDIAN_LATE_FRACTION = 10.0, 0.10


def _targets():
    """One well-behaved DoTCP host per path profile the population uses."""
    out = {}
    for h in POP.hosts:
        if h.path and h.path not in out and not h.hostile and "tcp" in h.dns and not h.peer:
            out[h.path] = h
    return out


TARGETS = _targets()


@pytest.fixture(scope="module")
def results(vantage):
    names = sorted(TARGETS)
    checks = []
    for n in names:
        checks.append({"kind": "ping", "addr": TARGETS[n].first, "count": PING_COUNT})
        checks.append({"kind": "tcpconnect", "addr": TARGETS[n].first, "port": 53, "count": CONNECT_COUNT})
    res = vantage.run(checks)
    return {n: (res[2 * i], res[2 * i + 1]) for i, n in enumerate(names)}


def _check(ms, path, what, where):
    assert ms, f"{where}: no {what} samples"
    p = POP.paths[path]
    j = 2 * p.jitter_ms
    lo = p.rtt_ms - j - EARLY_MS
    hi_min = p.rtt_ms + j + MIN_LATE_MS + MIN_LATE_FRACTION * p.rtt_ms
    hi_med = p.rtt_ms + j + MEDIAN_LATE_MS + MEDIAN_LATE_FRACTION * p.rtt_ms
    med, mn = statistics.median(ms), min(ms)
    print(f"{path}: {what} configured {p.rtt_ms:.1f} ms, min {mn:.2f} ms, median {med:.2f} ms, n={len(ms)}")
    assert mn >= lo, f"{where}: {what} min {mn:.2f} ms below {lo:.2f} ms (rtt {p.rtt_ms} ms): delivered early"
    assert mn <= hi_min, f"{where}: {what} min {mn:.2f} ms above {hi_min:.2f} ms (rtt {p.rtt_ms} ms)"
    assert med <= hi_med, f"{where}: {what} median {med:.2f} ms above {hi_med:.2f} ms (rtt {p.rtt_ms} ms)"


@pytest.mark.parametrize("path", sorted(TARGETS))
def test_ping_rtt(results, path):
    got = results[path][0]
    assert got["ok"], f"ping {TARGETS[path].first}: {got.get('error')}"
    _check(got["ms"], path, "ping", TARGETS[path].first)


@pytest.mark.parametrize("path", sorted(TARGETS))
def test_tcp_connect_rtt(results, path):
    got = results[path][1]
    assert got["ok"], f"TCP connect {TARGETS[path].first}:53: {got.get('error')}"
    _check(got["ms"], path, "TCP connect", TARGETS[path].first)
