#!/usr/bin/env bash
# Delay-line benchmark: configured vs measured RTT (ping, TCP connect) for 0/5/20/80/150/300 ms
# paths, idle and under a UDP flood through the line, then the packet rate it sustains.
# Brings up its own testbed instance (bn<pid>) and removes it. Needs root.
#
#   bench/delayline.sh                       # flood at 50,000 packets/s
#   DOQSCAN_BENCH_RATE=100000 bench/delayline.sh
#   DOQSCAN_BENCH_LEAD=0 bench/delayline.sh       # no early release (default 150us; calibration)
#   DOQSCAN_BENCH_QUEUES=2 DOQSCAN_BENCH_QUANTUM=200us bench/delayline.sh   # line --queues / --quantum
#   DOQSCAN_BENCH_ONLY=throughput DOQSCAN_BENCH_SECONDS=10 bench/delayline.sh
#
# The flood sender is paced like zmap (its own SCHED_FIFO thread, below the line's) and
# the TCP connects are timed around a blocking connect(2) on a SCHED_FIFO thread, so the
# machine's load shows less in the figures; received is counted by a UDP socket in the
# internet namespace (recvmmsg batches), kernel drops outside the line are printed.
#
# The accuracy goal is |measured - configured| <= 0.5 ms (column "goal 0.5ms"). Figures
# depend on machine load: the load average is printed with them.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go test -run '^$' -bench 'DelayLine' -benchtime 1x -timeout 20m ./internal/testbed/e2e/ "$@"
