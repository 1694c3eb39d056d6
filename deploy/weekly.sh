#!/usr/bin/env bash
# The weekly chain: scan (zprobe), then verification of what the scan found, each under
# jobrun's advisory lock. Configuration comes from the environment (/etc/doqscan/doqscan.env
# under systemd, the compose file's environment in a container):
#   DOQSCAN_HOME     installation directory (bin/, blocklist/)            default: this repo
#   DOQSCAN_VANTAGE  vantage point id                                     default: vp1
#   DATABASE_URL     PostgreSQL (unset: the private cluster)
#   ZPROBE_ARGS      extra zprobe flags (targets, rate, shard, seed ...)
#   VERIFY_ARGS      extra verify flags (GeoIP paths, concurrency ...)
set -euo pipefail
HOME_DIR=${DOQSCAN_HOME:-$(cd "$(dirname "$0")/.." && pwd)}
VANTAGE=${DOQSCAN_VANTAGE:-vp1}
BIN="$HOME_DIR/bin"
# shellcheck disable=SC2086
"$BIN/jobrun" --job scan --vantage "$VANTAGE" -- "$BIN/zprobe" scan --vantage "$VANTAGE" ${ZPROBE_ARGS:-}
# shellcheck disable=SC2086
"$BIN/jobrun" --job verify --vantage "$VANTAGE" -- "$BIN/verify" --vantage "$VANTAGE" ${VERIFY_ARGS:-}
