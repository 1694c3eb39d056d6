-- Compact records of each finished campaign's successful measurements, already paired
-- with their RTT (rtt_medians), derived once per campaign so that the analysis report
-- does not re-join every measurement with its RTT each time it runs (10 M measurements:
-- 30-150 s per report on the shared 2-core machine, ~5 s from these rows). Filled and
-- refreshed by the analysis package (analysis/doqscan_analysis/load.py,
-- refresh_measurement_facts); nothing else writes it.

-- One row per campaign and group: the measurements with status 'ok' and an rcode, as
-- `measurements` fixed-width big-endian records in `records`: the address (4 bytes for
-- family 4, 16 for family 6), then resolve_ns, handshake_ns and the RTT as float8 (NaN
-- when absent; the RTT is rtt_medians' value for the same campaign, address, port and
-- the protocol's transport), then the handshake_analyses cause as int2 (1 + its index in
-- the CHECK's list '1rtt', 'retry', 'version-negotiation', 'amplification', 'loss',
-- 'multiple', 'unknown'; 0 when the measurement has no analysis). A campaign writes its
-- analyses with its measurements, before it finishes.
CREATE TABLE IF NOT EXISTS measurement_facts (
    campaign_id    bigint      NOT NULL,                  -- -> measurement_fact_campaigns
    protocol       text        NOT NULL,
    phase          text        NOT NULL,
    mode           text        NOT NULL,
    key_share      text        NOT NULL,
    family         smallint    NOT NULL CHECK (family IN (4, 6)),
    measurements   integer     NOT NULL,
    records        bytea       NOT NULL,
    PRIMARY KEY (campaign_id, protocol, phase, mode, key_share, family)
);
-- random floats do not compress: store them out of line as they are (no pglz on read)
ALTER TABLE measurement_facts ALTER COLUMN records SET STORAGE EXTERNAL;

-- Campaigns whose measurement_facts are complete: written in the same transaction as
-- their rows, only for campaigns no longer 'running' whose rtt_medians are current;
-- stale when the campaign finished again after computed_at.
CREATE TABLE IF NOT EXISTS measurement_fact_campaigns (
    campaign_id    bigint      PRIMARY KEY REFERENCES campaigns (campaign_id) ON DELETE CASCADE,
    measurements   bigint      NOT NULL,                  -- records written
    computed_at    timestamptz NOT NULL DEFAULT now()
);
