-- Provenance of every run (internal/provenance): which build of which tool ran it from
-- which vantage point, with which zmap and probes (scans) or GeoIP builds (verification).
--
--   * scans, verification_runs and campaigns gain provenance: a JSON array of the
--     distinct provenance records of the runs that wrote the row (a resumed run by the
--     same build adds nothing; one by another build, zmap or probe is appended), oldest
--     first. A record: {"tool", "build": {"version", "revision", "modified", "go_version"},
--     "host", "vantage": {"id", "location", "contact"}, "zmap": {"binary", "path",
--     "version"}, "probes": [{"kind", "ports", "sha256"}], "geoip": [{"kind",
--     "database_type", "build_time", "sha256", "path"}]}.
--   * vantage_points gains location and contact (set by --vantage-location and
--     --vantage-contact, or DOQSCAN_VANTAGE_LOCATION / DOQSCAN_VANTAGE_CONTACT).

ALTER TABLE vantage_points ADD COLUMN IF NOT EXISTS location text NOT NULL DEFAULT '';
ALTER TABLE vantage_points ADD COLUMN IF NOT EXISTS contact  text NOT NULL DEFAULT '';

ALTER TABLE scans             ADD COLUMN IF NOT EXISTS provenance jsonb NOT NULL DEFAULT '[]';
ALTER TABLE verification_runs ADD COLUMN IF NOT EXISTS provenance jsonb NOT NULL DEFAULT '[]';
ALTER TABLE campaigns         ADD COLUMN IF NOT EXISTS provenance jsonb NOT NULL DEFAULT '[]';
