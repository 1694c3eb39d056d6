#!/usr/bin/env bash
# every.sh hourly|weekly COMMAND...: run COMMAND now, then at every boundary of the
# period (a scheduler for containers, where there is no systemd or cron): hourly at :00
# UTC, weekly on Mondays 00:00 UTC, as the systemd timers and the crontab. A run that
# overruns its period is not doubled: jobrun's lock and job_runs record the missed period.
# every.sh --next hourly|weekly [EPOCH]: print the next boundary after EPOCH (default:
# now) as epoch seconds and exit.
set -uo pipefail
usage() { echo "usage: every.sh hourly|weekly COMMAND... | every.sh --next hourly|weekly [EPOCH]" >&2; exit 2; }
# Boundaries are counted from Monday 1970-01-05 00:00 UTC (the epoch was a Thursday).
monday=345600
period_of() {
  case "$1" in
    hourly) echo 3600 ;;
    weekly) echo 604800 ;;
    *) echo "every.sh: period must be hourly or weekly, not '$1'" >&2; exit 2 ;;
  esac
}
next_after() { # PERIOD EPOCH
  echo $(( $2 - ($2 - monday) % $1 + $1 ))
}
[ $# -ge 2 ] || usage
if [ "$1" = "--next" ]; then
  p=$(period_of "$2") || exit 2
  now=${3:-$(date +%s)}
  [[ $now =~ ^[0-9]+$ ]] || usage
  next_after "$p" "$now"
  exit 0
fi
period=$(period_of "$1") || exit 2
shift
while true; do
  "$@" || echo "every.sh: $1 exited with $?" >&2
  now=$(date +%s)
  sleep $(( $(next_after "$period" "$now") - now ))
done
