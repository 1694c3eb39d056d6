#!/usr/bin/env bash
# scripts/sweep.sh: dnsbench's loss sweep and connection-reuse comparison on the simulated
# internet, stored in PostgreSQL, then the benchmarks report (./dev sweep runs it).
#
#   1. testnet up        namespaces, the delay line, simserver and the third-party peers
#   2. loss sweep        DoUDP, DoT and DoQ against AdGuard dnsproxy (198.19.3.7, 20 ms
#                        path) and CoreDNS (198.19.3.1, 150 ms path), at each loss level
#                        set on their paths (dnsbench --loss-sweep --store)
#   3. policy comparison the same targets once per connection policy (new session,
#                        persistent, 0-RTT) on the unchanged paths (dnsbench
#                        --compare-policies --store)
#   4. report            notebooks/benchmarks.ipynb executed headless into reports/<stamp>/
#
# dnsbench logs its progress to the terminal (stderr). Every run is stored under the
# label "sweep <UTC time>" (the sweep's levels add " loss=P%"), so the report shows this
# sweep and this comparison; re-running stores a new series and keeps the old ones. The full text output of both dnsbench runs is in
# var/sweep/<UTC time>/. The testbed is taken down at the end unless KEEP_TESTNET=1.
# Environment: DOQSCAN_TESTNET (instance, default "sweep"), SWEEP_LEVELS (loss levels in
# %, default 0,1,5,10,15,20), SWEEP_DURATION (per target and level, default 3s),
# SWEEP_WORKERS (default 16), SWEEP_TIMEOUT (per query, default 1s), SWEEP_SERVERS
# (addresses, default "198.19.3.7 198.19.3.1"), SWEEP_PROTOCOLS (default "doudp dot doq"),
# REUSE_COUNT (queries per target and policy, default 40), DATABASE_URL (default: the
# private cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export DOQSCAN_HOME="$ROOT"
INST=${DOQSCAN_TESTNET:-sweep}
LEVELS=${SWEEP_LEVELS:-0,1,5,10,15,20}
DURATION=${SWEEP_DURATION:-3s}
WORKERS=${SWEEP_WORKERS:-16}
TIMEOUT=${SWEEP_TIMEOUT:-1s}
read -r -a SERVERS <<<"${SWEEP_SERVERS:-198.19.3.7 198.19.3.1}"
read -r -a PROTOCOLS <<<"${SWEEP_PROTOCOLS:-doudp dot doq}"
REUSE_COUNT=${REUSE_COUNT:-40}
STAMP=$(date -u +%Y-%m-%dT%H%M%SZ)
LABEL="sweep $STAMP"
LOGS="var/sweep/$STAMP"
say() { printf '\n== %s\n' "$*" >&2; }
in_vantage() { bin/testnet --name "$INST" exec -- "$@"; }

cleanup() {
  if [ "${KEEP_TESTNET:-0}" != 1 ]; then
    say "testnet down ($INST)"
    bin/testnet --name "$INST" down || true
  fi
}
trap cleanup EXIT

TARGETS=()
for s in "${SERVERS[@]}"; do
  for p in "${PROTOCOLS[@]}"; do TARGETS+=("$p://$s"); done
done
mkdir -p "$LOGS"

say "testnet up ($INST): namespaces, delay line, servers"
bin/testnet --name "$INST" up

say "loss sweep: ${TARGETS[*]} at ${LEVELS//,/, } % loss, $DURATION each ($WORKERS workers, timeout $TIMEOUT)"
in_vantage bin/dnsbench --loss-sweep "$LEVELS" --duration "$DURATION" --workers "$WORKERS" --timeout "$TIMEOUT" \
  --store --label "$LABEL" "${TARGETS[@]}" >"$LOGS/loss-sweep.txt"
# The per-target reports stay in the file; the three tables close it.
sed -n '/^Queries per second (answered)/,$p' "$LOGS/loss-sweep.txt"

say "connection reuse: ${TARGETS[*]}, $REUSE_COUNT queries per policy (fresh, persistent, 0rtt)"
in_vantage bin/dnsbench --compare-policies fresh,persistent,0rtt --count "$REUSE_COUNT" --workers 2 --timeout 5s \
  --store --label "$LABEL" "${TARGETS[@]}" >"$LOGS/policies.txt"
sed -n '/^Query latency by connection policy/,$p' "$LOGS/policies.txt"

say "report: notebooks/benchmarks.ipynb"
./dev report --notebooks benchmarks | tee "$LOGS/report.txt"
FOLDER=$(sed -n 's/^report: \(\/.*\)$/\1/p' "$LOGS/report.txt" | head -n1)

cat <<EOF

== doqscan sweep: done
Stored in PostgreSQL ($(bin/dbctl url 2>/dev/null)) under the label "$LABEL":
  psql "\$(bin/dbctl url)" -c "SELECT label, protocol, host(address), policy, qps, success_rate, latency_mean_ms FROM bench_runs WHERE label LIKE '$LABEL%' ORDER BY bench_id"
dnsbench's full output: $LOGS/
Report: $FOLDER/benchmarks.html
  tables: $FOLDER/figures/loss_sweep_{qps,latency_mean_ms,success_rate}.csv, connection_reuse.csv
  figure: $FOLDER/figures/loss_sweep.png (and .svg)
EOF
