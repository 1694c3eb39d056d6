-- One spelling per fact across the outcome tables (internal/outcome; README "Outcomes").
--
-- rtt_samples.status: 'rst' (TCP RST to the SYN) and 'icmp' (ICMP port unreachable to
-- the UDP/QUIC probe) are the fact measurements.status calls 'conn-refused': the port is
-- closed and the path answered, so the sample has an RTT. The transport column still
-- says which (tcp: a RST; udp/quic: ICMP). Rows are rewritten, then the CHECK is the new
-- list (validated: every row satisfies it after the UPDATE).
ALTER TABLE rtt_samples DROP CONSTRAINT IF EXISTS rtt_samples_status_check;
UPDATE rtt_samples SET status = 'conn-refused' WHERE status IN ('rst', 'icmp');
ALTER TABLE rtt_samples ADD CONSTRAINT rtt_samples_status_check
    CHECK (status IN ('ok', 'timeout', 'conn-refused', 'error'));

-- job_runs.status gains 'interrupted': a job stopped from outside (SIGINT/SIGTERM to
-- jobrun) is recorded as scans, verification runs and campaigns record it
-- (store.RunStatusOf), instead of 'failed'. Widening: existing rows satisfy it.
ALTER TABLE job_runs DROP CONSTRAINT IF EXISTS job_runs_status_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_status_check
    CHECK (status IN ('running', 'ok', 'failed', 'interrupted', 'missed', 'skipped-locked')) NOT VALID;
