#!/usr/bin/env bash
# scripts/demo.sh: the main job on the simulated internet, end to end.
#
#   1. testnet up      namespaces, the delay line, simserver and the third-party peers
#   2. optout          the opt-out page on the scanner's address; an operator inside the
#                      simulated internet opts a range out through the form (curl, with
#                      the page's CSRF cookie and token) from an address inside it, so the
#                      page honours it at once (a larger range is accepted with `optout
#                      accept`); every later stage honours it
#   3. zprobe scan     the whole 198.19.0.0/16 on UDP/784, 853, 8853 (QUIC VN) and 53 (DNS)
#   4. verify          DoQ verification of every QUIC-capable host the scan found, each
#                      one's QUIC library, and the DoQ endpoints the DNS responders
#                      designate (DDR), whatever their port
#      conncheck       the weekly connection check of a sample of those resolvers:
#                      connection policies and the amplification budget
#   5. measure         one measurement round over DoUDP, DoTCP, DoT, DoH, DoQ (and DoH3)
#      then IPv6: zprobe send over the IPv6 hitlist, verify and measure (label demo6)
#   6. report          the notebooks, executed headless (when the analysis package is there),
#                      results by address family, dual-stack twins counted once
#
# Re-running it adds no duplicate rows (same ISO week, hour and vantage point). The
# testbed is taken down at the end unless KEEP_TESTNET=1.
# Environment: DOQSCAN_TESTNET (instance, default "demo"), DOQSCAN_VANTAGE (default
# "testbed"), DEMO_RATE (zmap packets/s, default 10000), DEMO_OPTOUT (the range opted
# out, default 198.19.35.224/27: 32 DoQ resolvers), DOQSCAN_VANTAGE_LOCATION and
# DOQSCAN_VANTAGE_CONTACT (the vantage point's location and contact, recorded with every
# run), DATABASE_URL (default: the private cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export DOQSCAN_HOME="$ROOT"
INST=${DOQSCAN_TESTNET:-demo}
VANTAGE=${DOQSCAN_VANTAGE:-testbed}
RATE=${DEMO_RATE:-10000}
OPTOUT_RANGE=${DEMO_OPTOUT:-198.19.35.224/27}
STATE="var/testnet/$INST"
# The location ends with "LAT,LON": the report's map (Fig. 2) marks the vantage point there.
# The simulated vantage point is placed in Munich, as the study's was (the testbed's
# shortest paths, eu-20ms, lead to its European sites).
export DOQSCAN_VANTAGE_LOCATION=${DOQSCAN_VANTAGE_LOCATION:-"simulated internet, namespace $INST-vantage (198.18.0.2), placed at Munich 48.15,11.57"}
export DOQSCAN_VANTAGE_CONTACT=${DOQSCAN_VANTAGE_CONTACT:-"root@$(hostname)"}
say() { printf '\n== %s\n' "$*" >&2; }
in_vantage() { bin/testnet --name "$INST" exec -- "$@"; }

OPTOUT_PID=
cleanup() {
  if [ -n "$OPTOUT_PID" ]; then kill "$OPTOUT_PID" 2>/dev/null || true; fi
  if [ "${KEEP_TESTNET:-0}" != 1 ]; then
    say "testnet down ($INST)"
    bin/testnet --name "$INST" down || true
  fi
}
trap cleanup EXIT

say "testnet up ($INST): namespaces, delay line, servers"
bin/testnet --name "$INST" up

say "optout: the opt-out page on the scanner's address; an operator opts $OPTOUT_RANGE out"
# The page runs where a scanner's would (its address, port 80); the operator's browser is
# curl in the internet namespace, from an address inside the range it opts out.
VANTAGE_ADDR=198.18.0.2
mkdir -p "$STATE/optout"
ip netns exec "$INST-vantage" bin/optout --listen "$VANTAGE_ADDR:80" \
  --blocklist-dir "$STATE/optout" --log-level warn &
OPTOUT_PID=$!
operator() {
  ip netns exec "$INST-inet" curl -fsS --interface "${OPTOUT_RANGE%/*}" \
    -b "$STATE/optout/cookies" -c "$STATE/optout/cookies" "$@"
}
# (Whole pages are captured before matching: a `| grep -q` would stop reading early
# and fail curl's write under pipefail.)
PAGE=$(operator --retry 30 --retry-connrefused --retry-delay 1 "http://$VANTAGE_ADDR/")
CSRF=$(sed -n 's/.*name="csrf" value="\([0-9a-f]*\)".*/\1/p' <<<"$PAGE")
CSRF=${CSRF%%$'\n'*}
[ -n "$CSRF" ] || { echo "demo: no CSRF token on the opt-out page" >&2; exit 1; }
DONE=$(operator --data-urlencode "csrf=$CSRF" --data-urlencode "range=$OPTOUT_RANGE" \
  --data-urlencode "email=noc@operator.example" --data-urlencode "note=doqscan demo" \
  "http://$VANTAGE_ADDR/optout")
# The operator's address is inside the range, so the default policy (own-range) honours a
# range up to a /24 at once. A larger DEMO_OPTOUT waits for review: the demo's scanner
# operator accepts it with the CLI, as a real one would after checking it.
if grep -qF 'id="pending"' <<<"$DONE"; then
  REQ=$(sed -n 's/.*recorded (request \([0-9]*\)).*/\1/p' <<<"$DONE" | head -n1)
  [ -n "$REQ" ] || { echo "demo: pending opt-out without a request id" >&2; exit 1; }
  echo "opt-out request $REQ for $OPTOUT_RANGE is pending review; the scanner's operator accepts it" >&2
  bin/optout accept "$REQ" --reason "demo: accepted by the scanner's operator" --blocklist-dir "$STATE/optout" --log-level warn
elif ! grep -qF 'id="confirmation"' <<<"$DONE" || ! grep -qF -- "$OPTOUT_RANGE" <<<"$DONE"; then
  echo "demo: the opt-out page did not confirm $OPTOUT_RANGE" >&2; exit 1
fi
kill "$OPTOUT_PID"; wait "$OPTOUT_PID" 2>/dev/null || true; OPTOUT_PID=
OPTED_AT=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
echo "opted out through the page: $OPTOUT_RANGE (blocklist file: $STATE/optout/optout.conf)" >&2

say "zprobe: scan 198.19.0.0/16 on UDP/784, 853, 8853 (QUIC) and 53 (DNS) at $RATE packets/s"
in_vantage bin/zprobe scan --vantage "$VANTAGE" --label demo --testbed 198.19.0.0/16 --rate "$RATE" \
  --probes-per-host 2 --cooldown 3 \
  --blocklist-dir blocklist --out var/scans

say "verify: DoQ verification of the QUIC-capable hosts of that scan"
bin/simserver pki --out "$STATE/pki" --population testbed/population.txt >/dev/null
# verify takes this vantage point's latest scan with --scan-label (the IPv6 send below
# is another label's); measure takes its latest verification run with --run-label.
VERIFY_ARGS=(--vantage "$VANTAGE" --label demo --scan-label demo --roots "$STATE/pki/roots.crt")
if [ -f "$STATE/geoip/GeoLite2-City.mmdb" ]; then
  VERIFY_ARGS+=(--geoip-city "$STATE/geoip/GeoLite2-City.mmdb" --geoip-asn "$STATE/geoip/GeoLite2-ASN.mmdb")
fi
SNI=$(awk '/^\[hosts\]/{h=1} h && / sni=/{for(i=1;i<=NF;i++) if ($i ~ /^sni=/) {sub(/^sni=/,"",$i); print $i}}' \
  testbed/population.txt | sort -u | paste -sd, -)
if [ -n "$SNI" ]; then VERIFY_ARGS+=(--sni-names "$SNI"); fi
in_vantage bin/verify "${VERIFY_ARGS[@]}"

say "conncheck: connection policies and the amplification budget of a sample of the resolvers"
# The weekly check, shortened for the demo: the behaviour classes and the third-party peers
# (198.19.1.0/24, 198.19.3.0/24: every chain size and policy of the population), shorter
# idle waits, and token ages either side of doq-retry's 10 s.
# conncheck takes this vantage point's latest verification run of its label (demo).
in_vantage bin/conncheck --vantage "$VANTAGE" --label demo \
  --only 198.19.1.0/24,198.19.3.0/24 --idle-waits 2s,8s --token-ages 0s,12s --max-queries 60 --concurrency 48 --blocklist-dir blocklist

say "measure: one round over every protocol for the DoQ-verified resolvers"
in_vantage bin/measure --vantage "$VANTAGE" --label demo --run-label demo

say "IPv6: zprobe send over the IPv6 hitlist ($STATE/hitlist6.txt), verify, measure"
in_vantage bin/zprobe send --vantage "$VANTAGE" --label demo6 --testbed 2001:2:0:8000::/49 \
  --hitlist "$STATE/hitlist6.txt" --rate 200 --cooldown 3s --blocklist-dir blocklist
in_vantage bin/verify "${VERIFY_ARGS[@]}" --label demo6 --scan-label demo6
in_vantage bin/measure --vantage "$VANTAGE" --label demo6 --run-label demo6

if [ -x .venv/bin/python ] && [ -d analysis ]; then
  say "report: notebooks executed headless"
  ./dev report --siblings "$ROOT/$STATE/siblings.csv" || echo "report failed (see above)" >&2
fi

say "release: dataset export (Parquet, one file set per ISO week and vantage point) into release/"
# Resumable: a second demo rewrites only the weeks whose runs changed. The opt-out page
# (its \"What we publish\") reads the same directory's manifest.
bin/dataset export --log-level warn "$ROOT/release" >/dev/null
RELEASE_SETS=$(grep -c '"iso_week"' "$ROOT/release/manifest.json" || true)
if [ -x .venv/bin/python ]; then
  # No opted-out address in any file of the release (dataset export leaves them out).
  LEAKED=$(.venv/bin/python -c "import duckdb, ipaddress, sys; rel, rng = sys.argv[1], ipaddress.ip_network(sys.argv[2])
addrs = duckdb.sql(f\"SELECT DISTINCT address FROM read_parquet('{rel}/*/*/measurements.parquet') UNION SELECT DISTINCT address FROM read_parquet('{rel}/*/*/scan_replies.parquet')\").fetchall()
print(sum(1 for (a,) in addrs if ipaddress.ip_address(a) in rng))" "$ROOT/release" "$OPTOUT_RANGE")
  echo "release: $RELEASE_SETS file sets; addresses of $OPTOUT_RANGE in it: $LEAKED (must be 0)" >&2
  if [ "$LEAKED" != 0 ]; then
    echo "demo: FAILED: the release holds addresses of the opted-out range $OPTOUT_RANGE" >&2
    exit 1
  fi
fi

URL=$(bin/dbctl url 2>/dev/null)
say "opt-out honoured: rows for $OPTOUT_RANGE since it was opted out (each must be 0)"
HONOURED=$(psql "$URL" -Atc "SELECT 'scan replies: ' || count(*) FROM scan_replies
                    WHERE address <<= '$OPTOUT_RANGE' AND received_at >= '$OPTED_AT'
  UNION ALL SELECT 'verification results: ' || count(*) FROM verification_results v JOIN verification_runs r USING (run_id)
                    WHERE v.address <<= '$OPTOUT_RANGE' AND r.started_at >= '$OPTED_AT'
  UNION ALL SELECT 'measurements: ' || count(*) FROM measurements
                    WHERE address <<= '$OPTOUT_RANGE' AND started_at >= '$OPTED_AT'")
echo "$HONOURED" >&2
if grep -qv ': 0$' <<<"$HONOURED"; then
  echo "demo: FAILED: the opted-out range $OPTOUT_RANGE was contacted" >&2
  exit 1
fi
say "by address family (a dual-stack twin is one server with two addresses: $STATE/siblings.csv)"
psql "$URL" -P pager=off -c "
  SELECT 'scan replies' AS stage, CASE family(s.address) WHEN 4 THEN 'IPv4' ELSE 'IPv6' END AS family,
         s.reply_kind AS kind, count(*) FROM scan_replies s JOIN scans c ON c.scan_id = s.scan_id
   WHERE c.label IN ('demo', 'demo6') AND c.vantage_id = '$VANTAGE' GROUP BY 1, 2, 3
  UNION ALL
  SELECT 'verify', CASE family(v.address) WHEN 4 THEN 'IPv4' ELSE 'IPv6' END, v.outcome, count(*)
    FROM verification_results v JOIN verification_runs r ON r.run_id = v.run_id
   WHERE r.label IN ('demo', 'demo6') AND r.vantage_id = '$VANTAGE' GROUP BY 1, 2, 3
  UNION ALL
  SELECT 'measure ok', CASE family(m.address) WHEN 4 THEN 'IPv4' ELSE 'IPv6' END, m.protocol, count(*)
    FROM measurements m JOIN campaigns c ON c.campaign_id = m.campaign_id
   WHERE c.label IN ('demo', 'demo6') AND c.vantage_id = '$VANTAGE' AND m.status = 'ok' GROUP BY 1, 2, 3
  ORDER BY 1, 2, 3" >&2

say "time partitions the rows went into (bin/dbctl status: every partition, its size and state)"
bin/dbctl status 2>/dev/null | awk 'NR == 2 || (/^(measurements|qlogs|rtt_samples|scan_replies) / && $4 > 0)' >&2

say "provenance: what produced the demo's scan, verification run and round"
psql "$URL" -P pager=off -c "
  WITH runs AS (
    SELECT 'scan' AS stage, iso_week AS key, vantage_id, provenance, started_at FROM scans WHERE label = 'demo' AND vantage_id = '$VANTAGE'
    UNION ALL SELECT 'verify', iso_week, vantage_id, provenance, started_at FROM verification_runs WHERE label = 'demo' AND vantage_id = '$VANTAGE'
    UNION ALL SELECT 'measure', to_char(round_hour AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24\"Z\"'), vantage_id, provenance, started_at
                FROM campaigns WHERE label = 'demo' AND vantage_id = '$VANTAGE')
  SELECT DISTINCT ON (stage) stage, key, p->>'tool' AS tool, p->'build'->>'version' AS version,
         left(p->'build'->>'revision', 12) || CASE WHEN (p->'build'->>'modified')::boolean THEN '+' ELSE '' END AS revision,
         p->'zmap'->>'version' AS zmap,
         (SELECT string_agg((e->>'kind') || ' ' || left(e->>'sha256', 12), ', ') FROM jsonb_array_elements(p->'probes') e) AS probes,
         (SELECT string_agg((e->>'kind') || ' ' || left(e->>'build_time', 10), ', ') FROM jsonb_array_elements(p->'geoip') e) AS geoip,
         p->'vantage'->>'location' AS location, p->'vantage'->>'contact' AS contact
    FROM (SELECT *, provenance->-1 AS p FROM runs) r ORDER BY stage, started_at DESC" >&2

cat <<EOF

== doqscan demo: done
The results are in PostgreSQL ($URL):
  psql "\$(bin/dbctl url)"
  SELECT reply_kind, port, count(*) FROM scan_replies GROUP BY 1, 2 ORDER BY 2, 1;
  SELECT outcome, alpn, count(*) FROM verification_results GROUP BY 1, 2 ORDER BY 3 DESC;
  SELECT protocol, phase, count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY handshake_ns)/1e6 AS hs_ms
    FROM measurements WHERE status = 'ok' GROUP BY 1, 2 ORDER BY 1, 2;
  SELECT cause, count(*) FROM handshake_analyses GROUP BY 1;
  SELECT library, count(*) FROM quic_stacks GROUP BY 1;
  SELECT status, count(*) FROM ddr_queries GROUP BY 1;
  SELECT protocol, retry_policy, count(*) FROM connection_policies GROUP BY 1, 2;
Raw zmap output: var/scans/   Reports: reports/ (newest folder)
Data release (Parquet, docs/data-release.md): $ROOT/release/ (manifest.json lists every file)
  the report from it:  ./dev report --source release/          (DuckDB; --engine spark for Apache Spark)
EOF
