-- Imported measurement data (cmd/dataset, internal/dataset): files another study
-- published (the PAM 2022 DoQ study's ZMap lists, verifier lists, certificate CSVs, misc
-- and performance SQLite files, location CSVs), mapped into the existing tables under a
-- vantage point and label naming the source. What those tables cannot say lives here:
--
--   * datasets gains kind 'import' (one row per imported directory; its sha256 is that
--     of the manifest of imported files, vantage point and label, so importing the same
--     files again finds the same row) and the vantage point, label and source it names;
--   * dataset_files lists every file of an import (format, hash, records read);
--   * scan_replies.reply_kind 'udp-reply': an address that answered the scan's UDP probe
--     when the source kept nothing but the address (ZMap's udp module output: no
--     payload, so neither VN validity nor the advertised versions are known);
--   * port 0 in verification_results and resolver_features means "the source did not
--     record the port" (the pre-study's verifier tried 784 then 8853 and kept only the
--     address); 0 is no port DoQ or DNS is ever served on;
--   * observed_certificates: leaf certificates seen on (address, protocol, port) in a
--     week, with the names and hashes the source recorded (the study's certificate CSVs
--     carry no DER, so they cannot be rows of certificates, which is keyed by the DER's
--     SHA-256; when the DER is known, sha256 points there);
--   * qlogs.format 'qlog-ndjson': qlog draft-02 NDJSON (quic-go v0.21), one event per line.

ALTER TABLE datasets DROP CONSTRAINT IF EXISTS datasets_kind_check;
ALTER TABLE datasets ADD CONSTRAINT datasets_kind_check
    CHECK (kind IN ('geoip-city', 'geoip-asn', 'geoip-country', 'other', 'import'));
ALTER TABLE datasets ADD COLUMN IF NOT EXISTS vantage_id text REFERENCES vantage_points (vantage_id);
ALTER TABLE datasets ADD COLUMN IF NOT EXISTS label text NOT NULL DEFAULT '';
ALTER TABLE datasets ADD COLUMN IF NOT EXISTS source text NOT NULL DEFAULT '';   -- the imported directory

CREATE TABLE IF NOT EXISTS dataset_files (
    dataset_id   bigint  NOT NULL REFERENCES datasets (dataset_id) ON DELETE CASCADE,
    path         text    NOT NULL,            -- relative to the imported directory
    format       text    NOT NULL CHECK (format IN ('zmap-list', 'zmap-union', 'verified-list', 'cert-csv',
                             'location-csv', 'misc-sqlite', 'perf-sqlite', 'not-imported')),
    sha256       bytea   NOT NULL CHECK (octet_length(sha256) = 32),
    size         bigint  NOT NULL,
    records      bigint  NOT NULL,            -- lines or rows read
    detail       text    NOT NULL DEFAULT '', -- what was skipped and why
    PRIMARY KEY (dataset_id, path)
);

-- Widening CHECKs: existing rows satisfy them by construction (NOT VALID skips the scan
-- of a large table; new rows are checked).
ALTER TABLE scan_replies DROP CONSTRAINT IF EXISTS scan_replies_reply_kind_check;
ALTER TABLE scan_replies ADD CONSTRAINT scan_replies_reply_kind_check CHECK (reply_kind IN (
    'quic-vn', 'quic-vn-invalid', 'quic-other', 'not-quic', 'dns', 'dns-malformed', 'icmp-unreach',
    'udp-reply')) NOT VALID;

ALTER TABLE qlogs DROP CONSTRAINT IF EXISTS qlogs_format_check;
ALTER TABLE qlogs ADD CONSTRAINT qlogs_format_check CHECK (format IN ('sqlog', 'qlog', 'qlog-ndjson')) NOT VALID;

CREATE TABLE IF NOT EXISTS observed_certificates (
    vantage_id      text    NOT NULL REFERENCES vantage_points (vantage_id),
    label           text    NOT NULL,
    iso_week        text    NOT NULL CHECK (iso_week ~ '^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$'),
    address         inet    NOT NULL,
    protocol        text    NOT NULL CHECK (protocol IN ('tls', 'https', 'quic')),
    port            integer NOT NULL CHECK (port BETWEEN 0 AND 65535),
    dataset_id      bigint  REFERENCES datasets (dataset_id),
    sha256          bytea   REFERENCES certificates (sha256),   -- when the DER is known
    md5             bytea,                                      -- MD5 of the DER, as the source recorded it
    subject_cn      text    NOT NULL DEFAULT '',
    organization    text[]  NOT NULL DEFAULT '{}',
    dns_names       text[]  NOT NULL DEFAULT '{}',
    authority_key_id bytea,
    subject_key_id  bytea,
    der_size        integer,
    key_type        text    NOT NULL DEFAULT '',
    signature_alg   text    NOT NULL DEFAULT '',
    x509_version    smallint,
    PRIMARY KEY (vantage_id, label, iso_week, address, protocol, port)
);
CREATE INDEX IF NOT EXISTS observed_certificates_addr_idx ON observed_certificates (address);
