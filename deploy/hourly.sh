#!/usr/bin/env bash
# hourly.sh [measure] [report]: the hourly round: one measurement round, then the report,
# each under jobrun's lock (default: both; the containers run one each). Environment as in
# weekly.sh, plus MEASURE_ARGS (extra measure flags) and REPORT_ARGS (extra report flags).
# The report runs `dev report` in a source tree, else python3 -m doqscan_analysis.report
# (the Jupyter image).
set -euo pipefail
HOME_DIR=${DOQSCAN_HOME:-$(cd "$(dirname "$0")/.." && pwd)}
VANTAGE=${DOQSCAN_VANTAGE:-vp1}
BIN="$HOME_DIR/bin"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(measure report)
for step in "${steps[@]}"; do
  case "$step" in
    measure)
      # shellcheck disable=SC2086
      "$BIN/jobrun" --job measure --vantage "$VANTAGE" -- "$BIN/measure" --vantage "$VANTAGE" ${MEASURE_ARGS:-}
      ;;
    report)
      if [ -x "$HOME_DIR/dev" ]; then report=("$HOME_DIR/dev" report); else report=(python3 -m doqscan_analysis.report); fi
      # shellcheck disable=SC2086
      "$BIN/jobrun" --job report --vantage "$VANTAGE" -- "${report[@]}" ${REPORT_ARGS:-}
      ;;
    *) echo "hourly.sh: unknown step '$step' (measure or report)" >&2; exit 2 ;;
  esac
done
