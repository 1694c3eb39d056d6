package release

// The release's tables: one SQL statement each over the logical tables of schema.sql
// (so it reads partitioned tables the same way). Columns keep the database's names;
// what has no portable Parquet type is converted here: inet -> text (host()), uuid and
// jsonb -> text, SHA-256 hashes -> lowercase hex. docs/data-release.md documents every
// column; TestTablesMatchTheDocs holds the two together.
//
// Every statement orders its rows by the table's natural key, so a file set written
// twice from the same rows is the same bytes. Set-level statements take $1 the ISO
// week, $2 the vantage point, $3 the honoured opt-out ranges (text[]); per-campaign
// statements take $1 the campaign, $2 the ISO week, $3 the opt-out ranges.

import "github.com/doqscan/doqscan/internal/protocol"

type tableSQL struct {
	name        string
	perCampaign bool // one statement per campaign of the set, in round order
	benchmarks  bool // a table of the benchmark set (BenchmarksVantage)
	sql         string
}

// qlogFileSQL names a measurement's qlog in the week's archive: the member named after
// the qlog's id, its extension after the stored format (qlogs.format).
const qlogFileSQL = `CASE WHEN m.qlog_id IS NULL THEN NULL
	ELSE 'qlogs.tar.gz:' || m.qlog_id::text || CASE q.format WHEN 'qlog' THEN '.qlog'
	     WHEN 'qlog-ndjson' THEN '.ndjson' ELSE '.sqlog' END END`

var tables = []tableSQL{
	{name: "scans", sql: `
		SELECT s.iso_week, s.vantage_id, s.scan_id, s.label, s.shard, s.shards, s.seed, s.ports, s.probe_version,
		       s.sender, s.rate_pps, s.bandwidth, s.started_at, s.finished_at, s.status,
		       s.summary::text AS summary, s.provenance::text AS provenance
		  FROM scans s WHERE s.iso_week = $1 AND s.vantage_id = $2 AND cardinality($3::text[]) >= 0
		 ORDER BY s.label, s.shard`},
	{name: "scan_runs", sql: `
		SELECT s.iso_week, s.vantage_id, r.scan_id, r.port, r.probe_kind, encode(r.probe_sha256, 'hex') AS probe_sha256,
		       r.started_at, r.finished_at, r.status, r.probes_sent, r.replies, r.blocklisted
		  FROM scan_runs r JOIN scans s USING (scan_id)
		 WHERE s.iso_week = $1 AND s.vantage_id = $2 AND cardinality($3::text[]) >= 0
		 ORDER BY s.label, s.shard, r.port`},
	{name: "scan_replies", sql: `
		SELECT s.iso_week, s.vantage_id, r.scan_id, r.port, host(r.address) AS address, r.sport, r.reply_kind,
		       r.quic_versions, r.grease_count, r.vn_cid_match, r.dns_rcode, r.dns_answers, r.dns_ra, r.icmp_type,
		       r.icmp_code, r.payload_len, r.payload, r.received_at
		  FROM scan_replies r JOIN scans s USING (scan_id)
		 WHERE s.iso_week = $1 AND s.vantage_id = $2 AND ` + `NOT (r.address <<= ANY($3::text[]::cidr[]))` + `
		 ORDER BY s.label, s.shard, r.port, r.address`},
	{name: "verification_runs", sql: `
		SELECT v.iso_week, v.vantage_id, v.run_id, v.label, v.scan_id, v.source, v.config::text AS config,
		       v.city_dataset, v.asn_dataset, v.started_at, v.finished_at, v.status, v.summary::text AS summary,
		       v.provenance::text AS provenance
		  FROM verification_runs v WHERE v.iso_week = $1 AND v.vantage_id = $2 AND cardinality($3::text[]) >= 0
		 ORDER BY v.label`},
	{name: "verification_results", sql: `
		SELECT v.iso_week, v.vantage_id, r.run_id, host(r.address) AS address, r.port, r.outcome, r.detail,
		       r.quic_version, r.alpn, r.tls_version, r.tls_cipher, r.handshake_ns, r.sni, r.sni_source,
		       r.cert_valid_for_sni,
		       (SELECT array_agg(encode(h, 'hex') ORDER BY o) FROM unnest(r.cert_chain) WITH ORDINALITY AS u(h, o)) AS cert_chain,
		       r.scan_versions, r.dns_rcode, r.dns_answers, r.attempts, r.verified_at
		  FROM verification_results r JOIN verification_runs v USING (run_id)
		 WHERE v.iso_week = $1 AND v.vantage_id = $2 AND NOT (r.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY v.label, r.address, r.port`},
	{name: "certificates", sql: `
		SELECT $1::text AS iso_week, $2::text AS vantage_id, encode(c.sha256, 'hex') AS sha256, c.der, c.subject,
		       c.subject_cn, c.sans, c.issuer, c.issuer_cn, c.serial, c.not_before, c.not_after, c.key_type, c.key_bits,
		       c.signature_alg, c.is_ca, c.self_signed
		  FROM certificates c
		 WHERE c.sha256 IN (SELECT unnest(r.cert_chain) FROM verification_results r JOIN verification_runs v USING (run_id)
		                     WHERE v.iso_week = $1 AND v.vantage_id = $2 AND NOT (r.address <<= ANY($3::text[]::cidr[]))
		                    UNION
		                    SELECT o.sha256 FROM observed_certificates o
		                     WHERE o.iso_week = $1 AND o.vantage_id = $2 AND NOT (o.address <<= ANY($3::text[]::cidr[])))
		 ORDER BY c.sha256`},
	{name: "observed_certificates", sql: `
		SELECT o.iso_week, o.vantage_id, o.label, host(o.address) AS address, o.protocol, o.port, o.dataset_id,
		       encode(o.sha256, 'hex') AS sha256, encode(o.md5, 'hex') AS md5, o.subject_cn, o.organization, o.dns_names,
		       encode(o.authority_key_id, 'hex') AS authority_key_id, encode(o.subject_key_id, 'hex') AS subject_key_id,
		       o.der_size, o.key_type, o.signature_alg, o.x509_version
		  FROM observed_certificates o
		 WHERE o.iso_week = $1 AND o.vantage_id = $2 AND NOT (o.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY o.label, o.address, o.protocol, o.port`},
	{name: "resolvers", sql: `
		SELECT $1::text AS iso_week, $2::text AS vantage_id, host(x.address) AS address, x.first_seen, x.last_seen
		  FROM resolvers x
		 WHERE x.address IN (SELECT r.address FROM verification_results r JOIN verification_runs v USING (run_id)
		                      WHERE v.iso_week = $1 AND v.vantage_id = $2)
		   AND NOT (x.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY x.address`},
	{name: "resolver_geo", sql: `
		SELECT $1::text AS iso_week, $2::text AS vantage_id, host(g.address) AS address, g.city_dataset, g.asn_dataset,
		       g.asn, g.as_org, g.country, g.continent, g.city, g.latitude, g.longitude
		  FROM resolver_geo g
		 WHERE g.address IN (SELECT r.address FROM verification_results r JOIN verification_runs v USING (run_id)
		                      WHERE v.iso_week = $1 AND v.vantage_id = $2)
		   AND NOT (g.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY g.address, g.city_dataset, g.asn_dataset`},
	{name: "quic_stacks", sql: `
		SELECT v.iso_week, v.vantage_id, q.run_id, host(q.address) AS address, q.port, q.library, q.matched, q.conflicts,
		       q.evidence::text AS evidence
		  FROM quic_stacks q JOIN verification_runs v USING (run_id)
		 WHERE v.iso_week = $1 AND v.vantage_id = $2 AND NOT (q.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY v.label, q.address, q.port`},
	{name: "ddr_queries", sql: `
		SELECT v.iso_week, v.vantage_id, q.run_id, host(q.address) AS address, q.status, q.rcode, q.records, q.detail,
		       q.queried_at
		  FROM ddr_queries q JOIN verification_runs v USING (run_id)
		 WHERE v.iso_week = $1 AND v.vantage_id = $2 AND NOT (q.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY v.label, q.address`},
	// A designation by an opted-out responder is left out, and so is an opted-out
	// address among the hints of another's.
	{name: "ddr_designations", sql: `
		SELECT v.iso_week, v.vantage_id, g.run_id, host(g.resolver) AS resolver, g.seq, g.priority, g.target, g.alpns,
		       g.port, g.dohpath,
		       ARRAY(SELECT host(h) FROM unnest(g.ipv4hints) WITH ORDINALITY AS u(h, o)
		              WHERE NOT (h <<= ANY($3::text[]::cidr[])) ORDER BY o) AS ipv4hints,
		       ARRAY(SELECT host(h) FROM unnest(g.ipv6hints) WITH ORDINALITY AS u(h, o)
		              WHERE NOT (h <<= ANY($3::text[]::cidr[])) ORDER BY o) AS ipv6hints
		  FROM ddr_designations g JOIN verification_runs v USING (run_id)
		 WHERE v.iso_week = $1 AND v.vantage_id = $2 AND NOT (g.resolver <<= ANY($3::text[]::cidr[]))
		 ORDER BY v.label, g.resolver, g.seq`},
	{name: "campaigns", sql: `
		SELECT $1::text AS iso_week, c.vantage_id, c.campaign_id, c.label, c.round_hour, c.run_id, c.config::text AS config,
		       c.planned, c.started_at, c.finished_at, c.status, c.summary::text AS summary, c.provenance::text AS provenance
		  FROM campaigns c
		 WHERE ` + `to_char(c.round_hour AT TIME ZONE 'UTC', 'IYYY-"W"IW')` + ` = $1 AND c.vantage_id = $2
		   AND cardinality($3::text[]) >= 0
		 ORDER BY c.round_hour, c.label`},
	{name: "measurements", perCampaign: true, sql: `
		SELECT $2::text AS iso_week, c.vantage_id, m.campaign_id, m.measurement_id::text AS measurement_id,
		       host(m.address) AS address, m.protocol, m.port, m.variant, m.mode, m.key_share, m.phase, m.seq,
		       m.started_at, m.handshake_ns, m.resolve_ns, m.status, m.error, m.rcode, m.answers, m.tls_version,
		       m.tls_cipher, m.quic_version, m.alpn, m.token_received, m.token_used, m.retry_seen, m.vn_seen,
		       m.resumed, m.used_0rtt, m.tfo, m.qlog_id::text AS qlog_id, ` + qlogFileSQL + ` AS qlog_file,
		       r.rtt_ns::float8 AS rtt_median_ns
		  FROM measurements m JOIN campaigns c USING (campaign_id)
		  LEFT JOIN LATERAL (SELECT q.format FROM qlogs q WHERE q.qlog_id = m.qlog_id OFFSET 0) q ON true
		  LEFT JOIN (SELECT s.address, s.transport, s.port, percentile_cont(0.5) WITHIN GROUP (ORDER BY s.rtt_ns) AS rtt_ns
		               FROM rtt_samples s WHERE s.campaign_id = $1 AND s.status = 'ok' AND s.rtt_ns > 0
		              GROUP BY 1, 2, 3) r
		    ON r.address = m.address AND r.port = m.port
		   AND r.transport = ` + protocol.TransportSQL("m.protocol") + `
		 WHERE m.campaign_id = $1 AND NOT (m.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY m.protocol, m.phase, m.address, m.port, m.variant, m.mode, m.key_share, m.seq`},
	{name: "rtt_samples", perCampaign: true, sql: `
		SELECT $2::text AS iso_week, c.vantage_id, s.campaign_id, host(s.address) AS address, s.transport, s.port,
		       s.seq, s.sent_at, s.rtt_ns, s.status, s.detail
		  FROM rtt_samples s JOIN campaigns c USING (campaign_id)
		 WHERE s.campaign_id = $1 AND NOT (s.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY s.address, s.transport, s.port, s.seq`},
	{name: "handshake_analyses", perCampaign: true, sql: `
		SELECT $2::text AS iso_week, c.vantage_id, m.campaign_id, h.measurement_id::text AS measurement_id, h.rtt_ns,
		       h.ratio, h.round_trips, h.one_rtt, h.version_negotiation, h.retry, h.amplification_stall, h.loss,
		       h.client_initial_bytes, h.server_bytes_pre_ack, h.stall_ns, h.cause, h.detail::text AS detail
		  FROM measurements m JOIN campaigns c ON c.campaign_id = m.campaign_id
		 -- one primary-key lookup per measurement of the campaign ("OFFSET 0" keeps the
		 -- planner from hashing the whole table once per campaign instead)
		 CROSS JOIN LATERAL (SELECT * FROM handshake_analyses h WHERE h.measurement_id = m.measurement_id OFFSET 0) h
		 WHERE m.campaign_id = $1 AND NOT (m.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY m.protocol, m.phase, m.address, m.port, m.variant, m.mode, m.key_share, m.seq`},
	{name: "resolver_features", perCampaign: true, sql: `
		SELECT $2::text AS iso_week, c.vantage_id, f.campaign_id, host(f.address) AS address, f.protocol, f.port,
		       f.feature, f.supported, f.detail
		  FROM resolver_features f JOIN campaigns c USING (campaign_id)
		 WHERE f.campaign_id = $1 AND NOT (f.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY f.address, f.protocol, f.port, f.feature`},
	{name: "policy_runs", sql: `
		SELECT p.iso_week, p.vantage_id, p.run_id, p.label, p.verification_run_id, p.source, p.config::text AS config,
		       p.started_at, p.finished_at, p.status, p.summary::text AS summary, p.provenance::text AS provenance
		  FROM policy_runs p WHERE p.iso_week = $1 AND p.vantage_id = $2 AND cardinality($3::text[]) >= 0
		 ORDER BY p.label`},
	{name: "connection_policies", sql: `
		SELECT p.iso_week, p.vantage_id, c.run_id, host(c.address) AS address, c.port, c.protocol, c.status,
		       c.queries_sent, c.queries_answered, c.closed_by_server, c.close_detail, c.idle_advertised_ms,
		       c.idle_alive_ms, c.idle_dead_ms, c.max_streams, c.token_issued, c.token_honoured,
		       c.token_honoured_for_ms, c.token_refused_after_ms, c.retry_policy, c.zero_rtt, c.resumed,
		       c.ticket_lifetime_s, c.detail::text AS detail, c.checked_at
		  FROM connection_policies c JOIN policy_runs p USING (run_id)
		 WHERE p.iso_week = $1 AND p.vantage_id = $2 AND NOT (c.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY p.label, c.address, c.port, c.protocol`},
	{name: "amplification_probes", sql: `
		SELECT p.iso_week, p.vantage_id, a.run_id, host(a.address) AS address, a.port, a.initial_size, a.key_share,
		       a.status, a.retry_seen, a.client_bytes, a.server_bytes_pre_ack, a.budget, a.stalled, a.stall_ns,
		       a.round_trips, a.cause, a.handshake_ns, a.chain_bytes, a.chain_certs, a.checked_at
		  FROM amplification_probes a JOIN policy_runs p USING (run_id)
		 WHERE p.iso_week = $1 AND p.vantage_id = $2 AND NOT (a.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY p.label, a.address, a.port, a.initial_size, a.key_share`},
	{name: "bench_runs", benchmarks: true, sql: `
		SELECT $1::text AS iso_week, b.bench_id, b.run_key, b.started_at, b.label, b.protocol, b.variant,
		       host(b.address) AS address, b.port, b.policy, b.load, b.workers, b.rate, b.elapsed_s, b.sent, b.answered,
		       b.qps, b.success_rate, b.latency_mean_ms, b.latency_p50_ms, b.latency_p99_ms, b.total_mean_ms,
		       b.ramp_max_qps, b.report::text AS report
		  FROM bench_runs b
		 WHERE ` + `to_char(b.started_at AT TIME ZONE 'UTC', 'IYYY-"W"IW')` + ` = $1 AND $2::text <> ''
		   AND NOT (b.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY b.started_at, b.run_key`},
	{name: "bench_samples", benchmarks: true, sql: `
		SELECT $1::text AS iso_week, s.bench_id, s.second, s.rate, s.sent, s.answered, s.failed, s.mean_ms, s.p99_ms
		  FROM bench_samples s JOIN bench_runs b USING (bench_id)
		 WHERE ` + `to_char(b.started_at AT TIME ZONE 'UTC', 'IYYY-"W"IW')` + ` = $1 AND $2::text <> ''
		   AND NOT (b.address <<= ANY($3::text[]::cidr[]))
		 ORDER BY b.started_at, b.run_key, s.second`},
}

// Release-wide tables, written at the top of the directory on every export.
var globalTables = []tableSQL{
	{name: "vantage_points", sql: `
		SELECT vantage_id, description, country, latitude, longitude, location
		  FROM vantage_points ORDER BY vantage_id`},
	{name: "datasets", sql: `
		SELECT dataset_id, kind, database_type, build_time, encode(sha256, 'hex') AS sha256, path,
		       vantage_id, label, source
		  FROM datasets ORDER BY dataset_id`},
}

// qlogsSQL lists a campaign's stored qlogs for the week's archive ($1 campaign, $3
// opt-outs; $2 unused).
const qlogsSQL = `
	SELECT q.qlog_id::text, q.format, q.encoding, q.data
	  FROM qlogs q
	 WHERE q.campaign_id = $1 AND $2::text <> '' AND NOT (q.address <<= ANY($3::text[]::cidr[]))
	 ORDER BY q.address, q.port, q.qlog_id`
