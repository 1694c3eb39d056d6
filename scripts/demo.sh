#!/usr/bin/env bash
# scripts/demo.sh: the main job on the simulated internet, end to end.
#
#   1. testnet up      namespaces, the delay line, simserver and the third-party peers
#   2. zprobe scan     the whole 198.19.0.0/16 on UDP/784, 853, 8853 (QUIC VN) and 53 (DNS)
#   3. verify          DoQ verification of every QUIC-capable host the scan found
#   4. measure         one measurement round over DoUDP, DoTCP, DoT, DoH, DoQ (and DoH3)
#   5. report          the notebooks, executed headless (when the analysis package is there)
#
# Re-running it adds no duplicate rows (same ISO week, hour and vantage point). The
# testbed is taken down at the end unless KEEP_TESTNET=1.
# Environment: DOQSCAN_TESTNET (instance, default "demo"), DOQSCAN_VANTAGE (default
# "testbed"), DEMO_RATE (zmap packets/s, default 5000), DATABASE_URL (default: the
# private cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export DOQSCAN_HOME="$ROOT"
INST=${DOQSCAN_TESTNET:-demo}
VANTAGE=${DOQSCAN_VANTAGE:-testbed}
RATE=${DEMO_RATE:-5000}
STATE="var/testnet/$INST"
say() { printf '\n== %s\n' "$*" >&2; }
in_vantage() { bin/testnet --name "$INST" exec -- "$@"; }

cleanup() {
  if [ "${KEEP_TESTNET:-0}" != 1 ]; then
    say "testnet down ($INST)"
    bin/testnet --name "$INST" down || true
  fi
}
trap cleanup EXIT

say "testnet up ($INST): namespaces, delay line, servers"
bin/testnet --name "$INST" up

say "zprobe: scan 198.19.0.0/16 on UDP/784, 853, 8853 (QUIC) and 53 (DNS) at $RATE packets/s"
in_vantage bin/zprobe scan --vantage "$VANTAGE" --label demo --testbed 198.19.0.0/16 --rate "$RATE" \
  --blocklist-dir blocklist --out var/scans

say "verify: DoQ verification of the QUIC-capable hosts of that scan"
VERIFY_ARGS=(--vantage "$VANTAGE" --label demo --scan-label demo)
if [ -d "$STATE/pki" ]; then VERIFY_ARGS+=(--roots "$STATE/pki/roots.pem"); fi
if [ -f "$STATE/geoip/GeoLite2-City.mmdb" ]; then
  VERIFY_ARGS+=(--geoip-city "$STATE/geoip/GeoLite2-City.mmdb" --geoip-asn "$STATE/geoip/GeoLite2-ASN.mmdb")
fi
SNI=$(awk '/^\[hosts\]/{h=1} h && / sni=/{for(i=1;i<=NF;i++) if ($i ~ /^sni=/) {sub(/^sni=/,"",$i); print $i}}' \
  testbed/population.txt | sort -u | paste -sd, -)
if [ -n "$SNI" ]; then VERIFY_ARGS+=(--sni-names "$SNI"); fi
in_vantage bin/verify "${VERIFY_ARGS[@]}"

say "measure: one round over every protocol for the DoQ-verified resolvers"
in_vantage bin/measure --vantage "$VANTAGE" --label demo

if [ -x .venv/bin/python ] && [ -d analysis ]; then
  say "report: notebooks executed headless"
  ./dev report || echo "report failed (see above)" >&2
fi

URL=$(bin/dbctl url 2>/dev/null)
cat <<EOF

== doqscan demo: done
The results are in PostgreSQL ($URL):
  psql "\$(bin/dbctl url)"
  SELECT reply_kind, port, count(*) FROM scan_replies GROUP BY 1, 2 ORDER BY 2, 1;
  SELECT outcome, alpn, count(*) FROM verification_results GROUP BY 1, 2 ORDER BY 3 DESC;
  SELECT protocol, phase, count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY handshake_ns)/1e6 AS hs_ms
    FROM measurements WHERE status = 'ok' GROUP BY 1, 2 ORDER BY 1, 2;
  SELECT cause, count(*) FROM handshake_analyses GROUP BY 1;
Raw zmap output: var/scans/   Reports: reports/ (newest folder)
EOF
