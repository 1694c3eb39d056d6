#!/usr/bin/env bash
# deploy/install.sh [--cron]: install the systemd units (or the crontab) for this
# checkout, with DOQSCAN_HOME set to its path. Run as root after ./dev build.
set -euo pipefail
HOME_DIR=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p /etc/doqscan
[ -f /etc/doqscan/doqscan.env ] || cat > /etc/doqscan/doqscan.env <<ENV
# doqscan configuration (see README.md)
DOQSCAN_VANTAGE=vp1
# DATABASE_URL=postgres://doqscan@db.example/doqscan
# ZPROBE_ARGS=--allowlist /etc/doqscan/targets.conf --rate 10000
ENV
if [ "${1:-}" = "--cron" ]; then
  sed "s|@DOQSCAN_HOME@|$HOME_DIR|g" "$HOME_DIR/deploy/crontab" > /etc/cron.d/doqscan
  echo "installed /etc/cron.d/doqscan"
  exit 0
fi
for f in "$HOME_DIR"/deploy/systemd/*; do
  sed "s|@DOQSCAN_HOME@|$HOME_DIR|g" "$f" > "/etc/systemd/system/$(basename "$f")"
done
systemctl daemon-reload
systemctl enable --now doqscan-weekly.timer doqscan-hourly.timer doqscan-optout.service
echo "installed and started the doqscan timers and the opt-out page"
