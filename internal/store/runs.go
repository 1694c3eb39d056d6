package store

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/jackc/pgx/v5"
)

// The run tables (scans, verification runs, campaigns) are written one row at a time,
// keyed by their natural key (ISO week or hour, vantage point, label, shard): starting the
// same run again returns the existing id, so its rows are written into the same run and
// deduplicated there.

// Vantage is a vantage point.
type Vantage struct {
	ID          string
	Description string
	Address     *netip.Addr
	Location    string // where it is (free text); "" keeps the stored one
	Contact     string // who answers for it; "" keeps the stored one
}

// EnsureVantage creates the vantage point if it is new and updates its description,
// address, location and contact with those given (empty ones keep what is stored).
func (s *Store) EnsureVantage(ctx context.Context, v Vantage) error {
	_, err := s.Pool.Exec(ctx, `INSERT INTO vantage_points (vantage_id, description, address, location, contact)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (vantage_id) DO UPDATE SET
		  description = CASE WHEN EXCLUDED.description = '' THEN vantage_points.description ELSE EXCLUDED.description END,
		  address = coalesce(EXCLUDED.address, vantage_points.address),
		  location = CASE WHEN EXCLUDED.location = '' THEN vantage_points.location ELSE EXCLUDED.location END,
		  contact = CASE WHEN EXCLUDED.contact = '' THEN vantage_points.contact ELSE EXCLUDED.contact END`,
		v.ID, v.Description, v.Address, v.Location, v.Contact)
	if err != nil {
		return fmt.Errorf("vantage %q: %w", v.ID, err)
	}
	return nil
}

// Scan is the natural key and parameters of a scan.
type Scan struct {
	ISOWeek      string
	VantageID    string
	Label        string
	Shard        int
	Shards       int
	Seed         *int64
	Ports        []int32
	ProbeVersion *int64
	Sender       string // zmap | builtin
	Targets      string
	RatePPS      *int32
	Bandwidth    *string
	Provenance   []byte // one provenance.Record (JSON); appended to the row's provenance unless already there
}

// StartScan returns the id of the scan with s's natural key, creating it if needed, and
// marks it running with this run's targets. existed says whether it was there before (a
// re-run).
func (s *Store) StartScan(ctx context.Context, sc Scan) (id int64, existed bool, err error) {
	if sc.Label == "" {
		sc.Label = "weekly"
	}
	if sc.Shards == 0 {
		sc.Shards = 1
	}
	if sc.Sender == "" {
		sc.Sender = "zmap"
	}
	err = s.Pool.QueryRow(ctx, `INSERT INTO scans (iso_week, vantage_id, label, shard, shards, seed, ports,
		    probe_version, sender, targets, rate_pps, bandwidth, provenance)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,`+provenanceArray(13)+`)
		ON CONFLICT (iso_week, vantage_id, label, shard) DO UPDATE SET
		    status = 'running', finished_at = NULL, targets = EXCLUDED.targets,
		    provenance = `+provenanceAppend("scans")+`,
		    ports = (SELECT array_agg(DISTINCT p ORDER BY p) FROM unnest(scans.ports || EXCLUDED.ports) p)
		RETURNING scan_id, (xmax <> 0)`,
		sc.ISOWeek, sc.VantageID, sc.Label, sc.Shard, sc.Shards, sc.Seed, sc.Ports,
		sc.ProbeVersion, sc.Sender, sc.Targets, sc.RatePPS, sc.Bandwidth, sc.Provenance).Scan(&id, &existed)
	if err != nil {
		return 0, false, fmt.Errorf("start scan %s/%s/%s shard %d: %w", sc.ISOWeek, sc.VantageID, sc.Label, sc.Shard, err)
	}
	return id, existed, nil
}

// ScanRun describes one zmap (or built-in sender) run of a scan on one port.
type ScanRun struct {
	ScanID      int64
	Port        int32
	ProbeKind   string // quic-vn | dns
	ProbeSHA256 []byte
	ZmapArgs    []string
	RawOutput   string
}

// StartScanRun records (or restarts) the run of a scan on one port.
func (s *Store) StartScanRun(ctx context.Context, r ScanRun) error {
	if r.ZmapArgs == nil {
		r.ZmapArgs = []string{}
	}
	_, err := s.Pool.Exec(ctx, `INSERT INTO scan_runs (scan_id, port, probe_kind, probe_sha256, zmap_args, raw_output)
		VALUES ($1,$2,$3,$4,$5,$6)
		ON CONFLICT (scan_id, port) DO UPDATE SET probe_kind = EXCLUDED.probe_kind,
		    probe_sha256 = EXCLUDED.probe_sha256, zmap_args = EXCLUDED.zmap_args,
		    raw_output = EXCLUDED.raw_output, started_at = now(), finished_at = NULL, status = 'running'`,
		r.ScanID, r.Port, r.ProbeKind, r.ProbeSHA256, r.ZmapArgs, r.RawOutput)
	if err != nil {
		return fmt.Errorf("start scan run %d port %d: %w", r.ScanID, r.Port, err)
	}
	return nil
}

// FinishScanRun closes a port's run with its status and counters.
func (s *Store) FinishScanRun(ctx context.Context, scanID int64, port int32, status RunStatus, sent, replies, blocklisted *int64) error {
	_, err := s.Pool.Exec(ctx, `UPDATE scan_runs SET status = $3, finished_at = now(),
		    probes_sent = $4, replies = $5, blocklisted = $6 WHERE scan_id = $1 AND port = $2`,
		scanID, port, status, sent, replies, blocklisted)
	return err
}

// FinishScan closes a scan with its status and JSON summary.
func (s *Store) FinishScan(ctx context.Context, scanID int64, status RunStatus, summary []byte) error {
	return s.finishRun(ctx, "scans", "scan_id", scanID, status, summary)
}

// finishRun closes the row of a run table (scans, verification_runs, campaigns) whose
// key column idCol is id, with its status and JSON summary.
func (s *Store) finishRun(ctx context.Context, table, idCol string, id int64, status RunStatus, summary []byte) error {
	_, err := s.Pool.Exec(ctx, `UPDATE `+table+` SET status = $2, finished_at = now(), summary = $3 WHERE `+idCol+` = $1`,
		id, status, summary)
	return err
}

// ScanState is a scan row found by its natural key, with its per-port runs.
type ScanState struct {
	ID      int64
	Status  RunStatus
	Ports   []int32
	Targets string
	Runs    map[int32]ScanRunState
}

// ScanRunState is what a scan_runs row says about one port.
type ScanRunState struct {
	Port        int32
	Status      RunStatus
	ProbeSHA256 []byte
	RawOutput   string
	ProbesSent  *int64
	Replies     *int64
	Blocklisted *int64
}

// FindScan returns the scan with the natural key and its runs; found is false if there
// is none.
func (s *Store) FindScan(ctx context.Context, isoWeek, vantage, label string, shard int) (st ScanState, found bool, err error) {
	err = s.Pool.QueryRow(ctx, `SELECT scan_id, status, ports, targets FROM scans
		WHERE iso_week = $1 AND vantage_id = $2 AND label = $3 AND shard = $4`,
		isoWeek, vantage, label, shard).Scan(&st.ID, &st.Status, &st.Ports, &st.Targets)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("find scan %s/%s/%s shard %d: %w", isoWeek, vantage, label, shard, err)
	}
	rows, err := s.Pool.Query(ctx, `SELECT port, status, probe_sha256, raw_output, probes_sent, replies, blocklisted
		FROM scan_runs WHERE scan_id = $1`, st.ID)
	if err != nil {
		return st, false, fmt.Errorf("scan runs of %d: %w", st.ID, err)
	}
	defer rows.Close()
	st.Runs = map[int32]ScanRunState{}
	for rows.Next() {
		var r ScanRunState
		if err := rows.Scan(&r.Port, &r.Status, &r.ProbeSHA256, &r.RawOutput, &r.ProbesSent, &r.Replies, &r.Blocklisted); err != nil {
			return st, false, err
		}
		st.Runs[r.Port] = r
	}
	return st, true, rows.Err()
}

// SettleScan closes a scan from its runs after a replay or a recovery: 'ok' when every
// port of the scan has an 'ok' run, else a scan left 'running' (its process is gone)
// becomes 'interrupted'; another status is kept.
func (s *Store) SettleScan(ctx context.Context, scanID int64) (status RunStatus, err error) {
	err = s.Pool.QueryRow(ctx, `UPDATE scans SET
		    status = CASE WHEN NOT EXISTS (SELECT 1 FROM unnest(scans.ports) p
		                  WHERE NOT EXISTS (SELECT 1 FROM scan_runs r WHERE r.scan_id = scans.scan_id AND r.port = p AND r.status = 'ok'))
		             THEN 'ok' WHEN status = 'running' THEN 'interrupted' ELSE status END,
		    finished_at = coalesce(finished_at, now())
		WHERE scan_id = $1 RETURNING status`, scanID).Scan(&status)
	if err != nil {
		return "", fmt.Errorf("settle scan %d: %w", scanID, err)
	}
	return status, nil
}

// VerificationRun is the natural key and parameters of a verification run.
type VerificationRun struct {
	ISOWeek     string
	VantageID   string
	Label       string
	ScanID      *int64
	Source      string // scan | file
	Config      []byte // JSON
	CityDataset *int64
	ASNDataset  *int64
	Provenance  []byte // one provenance.Record (JSON); appended to the row's provenance unless already there
}

// StartVerificationRun returns the id of the run with v's natural key, creating it if
// needed.
func (s *Store) StartVerificationRun(ctx context.Context, v VerificationRun) (id int64, existed bool, err error) {
	if v.Label == "" {
		v.Label = "weekly"
	}
	if v.Source == "" {
		v.Source = "scan"
	}
	if v.Config == nil {
		v.Config = []byte("{}")
	}
	err = s.Pool.QueryRow(ctx, `INSERT INTO verification_runs (iso_week, vantage_id, label, scan_id, source, config,
		    city_dataset, asn_dataset, provenance)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,`+provenanceArray(9)+`)
		ON CONFLICT (iso_week, vantage_id, label) DO UPDATE SET status = 'running', finished_at = NULL,
		    provenance = `+provenanceAppend("verification_runs")+`,
		    scan_id = coalesce(EXCLUDED.scan_id, verification_runs.scan_id), config = EXCLUDED.config,
		    city_dataset = coalesce(EXCLUDED.city_dataset, verification_runs.city_dataset),
		    asn_dataset = coalesce(EXCLUDED.asn_dataset, verification_runs.asn_dataset)
		RETURNING run_id, (xmax <> 0)`,
		v.ISOWeek, v.VantageID, v.Label, v.ScanID, v.Source, v.Config, v.CityDataset, v.ASNDataset, v.Provenance).Scan(&id, &existed)
	if err != nil {
		return 0, false, fmt.Errorf("start verification run %s/%s/%s: %w", v.ISOWeek, v.VantageID, v.Label, err)
	}
	return id, existed, nil
}

// FinishVerificationRun closes a verification run.
func (s *Store) FinishVerificationRun(ctx context.Context, runID int64, status RunStatus, summary []byte) error {
	return s.finishRun(ctx, "verification_runs", "run_id", runID, status, summary)
}

// Campaign is the natural key and parameters of one hourly measurement round.
type Campaign struct {
	VantageID  string
	Label      string
	RoundHour  time.Time // truncated to the hour (UTC)
	RunID      *int64
	Config     []byte // JSON
	Planned    *int32
	Provenance []byte // one provenance.Record (JSON); appended to the row's provenance unless already there
}

// StartCampaign returns the id of the round with c's natural key, creating it if needed.
func (s *Store) StartCampaign(ctx context.Context, c Campaign) (id int64, existed bool, err error) {
	if c.Label == "" {
		c.Label = "hourly"
	}
	if c.Config == nil {
		c.Config = []byte("{}")
	}
	hour := c.RoundHour.UTC().Truncate(time.Hour)
	err = s.Pool.QueryRow(ctx, `INSERT INTO campaigns (vantage_id, label, round_hour, run_id, config, planned, provenance)
		VALUES ($1,$2,$3,$4,$5,$6,`+provenanceArray(7)+`)
		ON CONFLICT (vantage_id, label, round_hour) DO UPDATE SET status = 'running', finished_at = NULL,
		    provenance = `+provenanceAppend("campaigns")+`,
		    run_id = coalesce(EXCLUDED.run_id, campaigns.run_id), planned = coalesce(EXCLUDED.planned, campaigns.planned)
		RETURNING campaign_id, (xmax <> 0)`,
		c.VantageID, c.Label, hour, c.RunID, c.Config, c.Planned, c.Provenance).Scan(&id, &existed)
	if err != nil {
		return 0, false, fmt.Errorf("start campaign %s/%s/%s: %w", c.VantageID, c.Label, hour.Format(time.RFC3339), err)
	}
	return id, existed, nil
}

// FinishCampaign closes a round.
func (s *Store) FinishCampaign(ctx context.Context, campaignID int64, status RunStatus, summary []byte) error {
	return s.finishRun(ctx, "campaigns", "campaign_id", campaignID, status, summary)
}

// Dataset is an external dataset version (a GeoIP database file).
type Dataset struct {
	Kind         string // geoip-city | geoip-asn | geoip-country | other
	DatabaseType string
	BuildTime    time.Time
	SHA256       []byte
	Path         string
}

// EnsureDataset records a dataset version once (by hash) and returns its id.
func (s *Store) EnsureDataset(ctx context.Context, d Dataset) (int64, error) {
	var id int64
	err := s.Pool.QueryRow(ctx, `INSERT INTO datasets (kind, database_type, build_time, sha256, path)
		VALUES ($1,$2,$3,$4,$5)
		ON CONFLICT (sha256) DO UPDATE SET path = EXCLUDED.path
		RETURNING dataset_id`, d.Kind, d.DatabaseType, d.BuildTime, d.SHA256, d.Path).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("dataset %s: %w", d.Path, err)
	}
	return id, nil
}

// provenanceArray is the SQL of a run row's first provenance array from parameter $n
// (one record, or NULL: none).
func provenanceArray(n int) string {
	return fmt.Sprintf("CASE WHEN $%[1]d::jsonb IS NULL THEN '[]'::jsonb ELSE jsonb_build_array($%[1]d::jsonb) END", n)
}

// provenanceAppend is the SQL that appends the new row's record (EXCLUDED.provenance's
// only element, if any) to table's provenance unless an equal record is there: the same
// build resuming its run adds nothing.
func provenanceAppend(table string) string {
	return fmt.Sprintf(`CASE WHEN jsonb_array_length(EXCLUDED.provenance) = 0
		    OR EXISTS (SELECT 1 FROM jsonb_array_elements(%[1]s.provenance) e WHERE e = EXCLUDED.provenance->0)
		  THEN %[1]s.provenance ELSE %[1]s.provenance || EXCLUDED.provenance END`, table)
}

// VantageRole is the database role of vantage point id on a central database: "vp_" and
// the id (docs/fleet.md).
func VantageRole(id string) (string, error) {
	r := "vp_" + id
	if len(r) > 63 {
		return "", fmt.Errorf("vantage %q: role name %q is longer than PostgreSQL's 63 bytes", id, r)
	}
	return r, nil
}

// AddVantageRole creates (or completes) the login role of vantage point id with the
// grants of a vantage point (doqscan_grant_vantage: its own rows only, no schema change,
// no opt-out requester's details), records the vantage point and maps the role to it.
// Run by the admin (a role that may create roles); running it again changes nothing.
func (s *Store) AddVantageRole(ctx context.Context, id string) (string, error) {
	role, err := VantageRole(id)
	if err != nil {
		return "", err
	}
	if err := s.EnsureVantage(ctx, Vantage{ID: id}); err != nil {
		return "", err
	}
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN"); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `SELECT doqscan_grant_vantage($1)`, role); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO vantage_roles (role_name, vantage_id) VALUES ($1, $2)
			ON CONFLICT (role_name) DO UPDATE SET vantage_id = EXCLUDED.vantage_id`, role, id)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("role of vantage %q: %w", id, err)
	}
	return role, nil
}
