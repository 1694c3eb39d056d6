#!/usr/bin/env bash
# every.sh SECONDS COMMAND...: run COMMAND at every multiple of SECONDS since the epoch
# (a scheduler for containers, where there is no systemd or cron). A run that overruns
# its period is not doubled: jobrun's lock and job_runs record the missed period.
set -uo pipefail
period=$1; shift
while true; do
  "$@" || echo "every.sh: $1 exited with $?" >&2
  now=$(date +%s)
  sleep $(( period - now % period ))
done
