-- The fleet's vantage roles (0013) over the tables of 0020: a vantage point's role writes
-- its own QUIC library labels, DDR answers and connection-policy runs, and sees only its
-- own, exactly as for the tables 0013 covers.
--
--   * policy_runs carries vantage_id: the same own_vantage policy as the other run tables.
--   * quic_stacks, ddr_queries, ddr_designations hang off verification_runs, and
--     connection_policies, amplification_probes off policy_runs, by declared FOREIGN KEYs
--     (which bypass RLS): every command needs the parent visible.
--   * doqscan_grant_vantage grants them (and policy_runs' sequence); the roles that
--     already exist get the same grants here.

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['policy_runs', 'quic_stacks', 'ddr_queries', 'ddr_designations',
                             'connection_policies', 'amplification_probes'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('DROP POLICY IF EXISTS own_vantage ON %I', t);
    END LOOP;
END $$;
CREATE POLICY own_vantage ON policy_runs
    USING (doqscan_vantage() IS NULL OR vantage_id = doqscan_vantage());
CREATE POLICY own_vantage ON quic_stacks
    USING (doqscan_vantage() IS NULL OR run_id IN (SELECT run_id FROM verification_runs));
CREATE POLICY own_vantage ON ddr_queries
    USING (doqscan_vantage() IS NULL OR run_id IN (SELECT run_id FROM verification_runs));
CREATE POLICY own_vantage ON ddr_designations
    USING (doqscan_vantage() IS NULL OR run_id IN (SELECT run_id FROM verification_runs));
CREATE POLICY own_vantage ON connection_policies
    USING (doqscan_vantage() IS NULL OR run_id IN (SELECT run_id FROM policy_runs));
CREATE POLICY own_vantage ON amplification_probes
    USING (doqscan_vantage() IS NULL OR run_id IN (SELECT run_id FROM policy_runs));

CREATE OR REPLACE FUNCTION doqscan_grant_vantage(role text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), role);
    FOREACH t IN ARRAY ARRAY['vantage_points', 'scans', 'scan_runs', 'verification_runs', 'verification_results',
                             'campaigns', 'resolver_features', 'job_runs', 'certificates', 'resolvers',
                             'resolver_geo', 'datasets', 'quic_stacks', 'ddr_queries', 'ddr_designations',
                             'policy_runs', 'connection_policies', 'amplification_probes'] LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I TO %I', t, role);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['scan_replies', 'measurements', 'qlogs', 'rtt_samples', 'handshake_analyses'] LOOP
        EXECUTE format('GRANT SELECT, INSERT ON %I TO %I', t, role);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['schema_migrations', 'vantage_roles', 'partition_archive'] LOOP
        EXECUTE format('GRANT SELECT ON %I TO %I', t, role);
    END LOOP;
    EXECUTE format('GRANT SELECT (request_id, prefix, status, created_at, updated_at) ON optout_requests TO %I', role);
    FOREACH t IN ARRAY ARRAY['scans_scan_id_seq', 'verification_runs_run_id_seq', 'campaigns_campaign_id_seq',
                             'datasets_dataset_id_seq', 'policy_runs_run_id_seq'] LOOP
        EXECUTE format('GRANT USAGE ON SEQUENCE %I TO %I', t, role);
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION doqscan_grant_vantage(text) FROM PUBLIC;

DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT role_name FROM vantage_roles WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) LOOP
        PERFORM doqscan_grant_vantage(r);
    END LOOP;
END $$;
