-- Per-key RTT medians, derived from rtt_samples once per finished campaign so that the
-- analysis report does not re-sort every RTT sample each time it runs (10 M samples:
-- ~75 s per report before this table). Filled and refreshed by the analysis package
-- (analysis/doqscan_analysis/load.py, refresh_rtt_medians); nothing else writes it.

-- RTT of (campaign, address, transport, port): the exact median (percentile_cont(0.5))
-- of its answered samples (status 'ok', rtt_ns > 0).
CREATE TABLE IF NOT EXISTS rtt_medians (
    campaign_id    bigint           NOT NULL,             -- -> rtt_median_campaigns
    address        inet             NOT NULL,
    transport      text             NOT NULL,
    port           integer          NOT NULL,
    rtt_ns         double precision NOT NULL,
    samples        integer          NOT NULL,             -- answered samples behind the median
    PRIMARY KEY (campaign_id, address, transport, port)
);

-- Campaigns whose rtt_medians are complete: written in the same transaction as their
-- rows, only for campaigns no longer 'running'; stale when the campaign finished again
-- after computed_at. Deleting a campaign drops its marker (its rtt_medians rows are then
-- ignored and replaced by the next refresh of that campaign id, which never recurs).
CREATE TABLE IF NOT EXISTS rtt_median_campaigns (
    campaign_id    bigint      PRIMARY KEY REFERENCES campaigns (campaign_id) ON DELETE CASCADE,
    keys           integer     NOT NULL,                  -- rtt_medians rows written
    computed_at    timestamptz NOT NULL DEFAULT now()
);
