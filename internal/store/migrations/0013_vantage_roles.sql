-- One central database for a fleet of vantage points (docs/fleet.md).
--
-- Each vantage point logs in with a role of its own (created by `dbctl
-- add-vantage`, which calls doqscan_grant_vantage below), mapped to its vantage point in
-- vantage_roles. Two mechanisms keep vantage points apart, each where it is cheapest:
--
--   * Row-level security on every table whose rows belong to one vantage point. The run
--     tables (vantage_points, scans, verification_runs, campaigns, job_runs) carry
--     vantage_id: a vantage role sees, inserts and updates only its own. Their children
--     (scan_runs, scan_replies, verification_results, resolver_features, measurements,
--     qlogs, rtt_samples, handshake_analyses) are visible to it only under its own parents.
--     Inserting children needs no per-row policy on the high-volume tables: the
--     statement-level parent check (doqscan_check_parent) runs as the inserting role, so
--     under RLS another vantage point's campaign or scan is simply missing and the batch
--     is refused as an orphan, at the cost the check already had. The tables with
--     declared FOREIGN KEYs (which bypass RLS) check the parent in an INSERT policy.
--   * Grants for what is not a matter of rows: a vantage role may not alter the schema
--     (it owns nothing and has no CREATE on the schema), may not DELETE anything, and
--     reads only the prefix, status and dates of opt-out requests, never who asked
--     (column privileges: email, note and source address stay with the admin and the
--     opt-out page's role).
--
-- Roles not in vantage_roles (the admin, who owns the tables and bypasses RLS; a read-only
-- analysis role) see every row. Why RLS rather than a table or schema per vantage point:
-- the report reads one set of tables across vantage points, and the partitions already
-- split the tables by time.

CREATE TABLE IF NOT EXISTS vantage_roles (
    role_name    text PRIMARY KEY,                 -- a login role of the server
    vantage_id   text        NOT NULL REFERENCES vantage_points (vantage_id),
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- The vantage point of the current role; NULL for a role that is not a vantage point's.
CREATE OR REPLACE FUNCTION doqscan_vantage() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT vantage_id FROM vantage_roles WHERE role_name = current_user
$$;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['vantage_points', 'scans', 'verification_runs', 'campaigns', 'job_runs', 'scan_runs',
                             'scan_replies', 'verification_results', 'resolver_features', 'measurements', 'qlogs',
                             'rtt_samples', 'handshake_analyses'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['vantage_points', 'scans', 'verification_runs', 'campaigns', 'job_runs'] LOOP
        EXECUTE format('DROP POLICY IF EXISTS own_vantage ON %I', t);
        EXECUTE format('CREATE POLICY own_vantage ON %I USING (doqscan_vantage() IS NULL OR vantage_id = doqscan_vantage())', t);
    END LOOP;
END $$;

-- Children with a declared FOREIGN KEY: every command, the parent must be visible.
DROP POLICY IF EXISTS own_vantage ON scan_runs;
CREATE POLICY own_vantage ON scan_runs
    USING (doqscan_vantage() IS NULL OR scan_id IN (SELECT scan_id FROM scans));
DROP POLICY IF EXISTS own_vantage ON verification_results;
CREATE POLICY own_vantage ON verification_results
    USING (doqscan_vantage() IS NULL OR run_id IN (SELECT run_id FROM verification_runs));
DROP POLICY IF EXISTS own_vantage ON resolver_features;
CREATE POLICY own_vantage ON resolver_features
    USING (doqscan_vantage() IS NULL OR campaign_id IN (SELECT campaign_id FROM campaigns));

-- High-volume children: read under a visible parent; insert checked by the
-- statement-level parent check (see above).
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['measurements', 'qlogs', 'rtt_samples'] LOOP
        EXECUTE format('DROP POLICY IF EXISTS own_vantage ON %I', t);
        EXECUTE format('DROP POLICY IF EXISTS insert_checked ON %I', t);
        EXECUTE format('CREATE POLICY own_vantage ON %I FOR SELECT USING (doqscan_vantage() IS NULL OR '
                       'campaign_id IN (SELECT campaign_id FROM campaigns))', t);
        EXECUTE format('CREATE POLICY insert_checked ON %I FOR INSERT WITH CHECK (true)', t);
    END LOOP;
END $$;
DROP POLICY IF EXISTS own_vantage ON scan_replies;
DROP POLICY IF EXISTS insert_checked ON scan_replies;
CREATE POLICY own_vantage ON scan_replies FOR SELECT
    USING (doqscan_vantage() IS NULL OR scan_id IN (SELECT scan_id FROM scans));
CREATE POLICY insert_checked ON scan_replies FOR INSERT WITH CHECK (true);
DROP POLICY IF EXISTS own_vantage ON handshake_analyses;
DROP POLICY IF EXISTS insert_checked ON handshake_analyses;
CREATE POLICY own_vantage ON handshake_analyses FOR SELECT
    USING (doqscan_vantage() IS NULL OR measurement_id IN (SELECT measurement_id FROM measurements));
CREATE POLICY insert_checked ON handshake_analyses FOR INSERT WITH CHECK (true);

-- The grants of a vantage point's role (dbctl add-vantage). Run by the admin.
CREATE OR REPLACE FUNCTION doqscan_grant_vantage(role text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), role);
    FOREACH t IN ARRAY ARRAY['vantage_points', 'scans', 'scan_runs', 'verification_runs', 'verification_results',
                             'campaigns', 'resolver_features', 'job_runs', 'certificates', 'resolvers',
                             'resolver_geo', 'datasets'] LOOP
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
                             'datasets_dataset_id_seq'] LOOP
        EXECUTE format('GRANT USAGE ON SEQUENCE %I TO %I', t, role);
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION doqscan_grant_vantage(text) FROM PUBLIC;
