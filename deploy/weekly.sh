#!/usr/bin/env bash
# The weekly chain: scan (zprobe), then verification of what the scan found (QUIC
# libraries and DDR designations included), then the connection check of its resolvers
# (conncheck), each under jobrun's advisory lock. Configuration comes from the environment (/etc/doqscan/doqscan.env
# under systemd and cron, the compose file's environment in a container):
#   DOQSCAN_HOME     installation directory (bin/, blocklist/, var/)     default: this script's ../
#   DOQSCAN_VANTAGE  vantage point id                                     default: vp1
#   DATABASE_URL     PostgreSQL (unset: the private cluster)
#   ZPROBE_ARGS      zprobe scan flags naming the targets and the rate    required
#                    (--allowlist FILE or --internet-wide; --rate or --bandwidth; --seed, --shards, --shard)
#   VERIFY_ARGS      extra verify flags (GeoIP paths, concurrency ...)
#   CONNCHECK_ARGS   extra conncheck flags (concurrency, --sample ...)
# Exit 2 (before anything runs) when ZPROBE_ARGS is empty.
set -euo pipefail
HOME_DIR=${DOQSCAN_HOME:-$(cd "$(dirname "$0")/.." && pwd)}
VANTAGE=${DOQSCAN_VANTAGE:-vp1}
BIN="$HOME_DIR/bin"
if [ -z "${ZPROBE_ARGS//[[:space:]]/}" ]; then
  echo "weekly.sh: ZPROBE_ARGS is empty: set it (in /etc/doqscan/doqscan.env, or the environment of" \
    "docker compose) to the scan's targets and rate, e.g." \
    "ZPROBE_ARGS='--allowlist /etc/doqscan/targets.conf --rate 10000' or" \
    "ZPROBE_ARGS='--internet-wide --bandwidth 100M --seed 42'; see docs/runbook.md" >&2
  exit 2
fi
# shellcheck disable=SC2086
"$BIN/jobrun" --job scan --vantage "$VANTAGE" -- "$BIN/zprobe" scan --vantage "$VANTAGE" $ZPROBE_ARGS
# shellcheck disable=SC2086
"$BIN/jobrun" --job verify --vantage "$VANTAGE" -- "$BIN/verify" --vantage "$VANTAGE" ${VERIFY_ARGS:-}
# shellcheck disable=SC2086
"$BIN/jobrun" --job conncheck --vantage "$VANTAGE" -- "$BIN/conncheck" --vantage "$VANTAGE" ${CONNCHECK_ARGS:-}
