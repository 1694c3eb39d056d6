#!/usr/bin/env bash
# Delay-line benchmark: configured vs measured RTT (ping, TCP connect) for 0/5/20/80/150/300 ms
# paths, idle and under a UDP flood through the line, then the packet rate it sustains.
# Brings up its own testbed instance (bn<pid>) and removes it. Needs root.
#
#   bench/delayline.sh                       # flood at 50,000 packets/s
#   DOQSCAN_BENCH_RATE=100000 bench/delayline.sh
#   DOQSCAN_BENCH_LEAD=0 bench/delayline.sh       # no early release (default 100us; calibration)
#
# The accuracy goal is |measured - configured| <= 0.5 ms (column "goal 0.5ms"). Figures
# depend on machine load: the load average is printed with them.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go test -run '^$' -bench 'DelayLine' -benchtime 1x -timeout 20m ./internal/testbed/ "$@"
