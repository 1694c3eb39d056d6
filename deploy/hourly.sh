#!/usr/bin/env bash
# The hourly round: one measurement round, then the report, each under jobrun's lock.
# Environment as in weekly.sh, plus MEASURE_ARGS and REPORT_ARGS.
set -euo pipefail
HOME_DIR=${DOQSCAN_HOME:-$(cd "$(dirname "$0")/.." && pwd)}
VANTAGE=${DOQSCAN_VANTAGE:-vp1}
BIN="$HOME_DIR/bin"
# shellcheck disable=SC2086
"$BIN/jobrun" --job measure --vantage "$VANTAGE" -- "$BIN/measure" --vantage "$VANTAGE" ${MEASURE_ARGS:-}
# shellcheck disable=SC2086
"$BIN/jobrun" --job report --vantage "$VANTAGE" -- "$HOME_DIR/dev" report ${REPORT_ARGS:-}
