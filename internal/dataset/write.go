package dataset

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doqscan/doqscan/internal/certs"
	"github.com/doqscan/doqscan/internal/store"
)

// The study's verifier (quic-go 0.21): what every imported verification run tried.
var studyVerifier = map[string]any{
	"source":   "imported",
	"alpns":    []string{"doq-i06", "doq-i05", "doq-i04", "doq-i03", "doq-i02", "doq-i01", "doq-i00"},
	"versions": []string{"v1", "draft-34", "draft-32", "draft-29"},
	"ports":    []int{784, 8853},
	"sni":      "none",
	"timeout":  "2s",
	"note":     "a listed address completed a QUIC handshake with a DoQ ALPN; no DNS query was recorded",
}

// studyProbeVersion is the QUIC version of the study's ZMap probe (a quic-go Initial
// with the version overwritten to force Version Negotiation).
const studyProbeVersion = 0xffffffff

// ObservedCertificate is a leaf certificate seen on (address, protocol, port) in a week
// (table observed_certificates, migration 0006).
type ObservedCertificate struct {
	VantageID      string     `db:"vantage_id"`
	Label          string     `db:"label"`
	ISOWeek        string     `db:"iso_week"`
	Address        netip.Addr `db:"address"`
	Protocol       string     `db:"protocol"`
	Port           int32      `db:"port"`
	DatasetID      *int64     `db:"dataset_id"`
	SHA256         []byte     `db:"sha256"`
	MD5            []byte     `db:"md5"`
	SubjectCN      string     `db:"subject_cn"`
	Organization   []string   `db:"organization"`
	DNSNames       []string   `db:"dns_names"`
	AuthorityKeyID []byte     `db:"authority_key_id"`
	SubjectKeyID   []byte     `db:"subject_key_id"`
	DERSize        *int32     `db:"der_size"`
	KeyType        string     `db:"key_type"`
	SignatureAlg   string     `db:"signature_alg"`
	X509Version    *int16     `db:"x509_version"`
}

// datasetFile is a row of dataset_files.
type datasetFile struct {
	DatasetID int64  `db:"dataset_id"`
	Path      string `db:"path"`
	Format    string `db:"format"`
	SHA256    []byte `db:"sha256"`
	Size      int64  `db:"size"`
	Records   int64  `db:"records"`
	Detail    string `db:"detail"`
}

// manifest is the hash that identifies an import: the imported files (path and
// content), the vantage point and the label.
func (p *plan) manifest(cfg Config) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "doqscan import\x00%s\x00%s\n", cfg.Vantage, cfg.Label)
	for _, f := range p.files {
		if f.Format == "not-imported" {
			continue
		}
		fmt.Fprintf(h, "%s\x00%x\n", f.Path, f.SHA256)
	}
	return h.Sum(nil)
}

// tx helpers: rows written with store.InsertTx count as new only when they were not
// there already.
type writer struct {
	ctx context.Context
	tx  pgx.Tx
	new map[string]int64
}

func insert[T any](w *writer, table string, rows []T) error {
	n, err := store.InsertTx(w.ctx, w.tx, table, rows)
	if err != nil {
		return err
	}
	w.new[table] += n
	return nil
}

// upsertID runs an INSERT ... ON CONFLICT DO UPDATE (a no-op update) RETURNING id,
// (xmax = 0) and counts a new row under table.
func (w *writer) upsertID(table, sql string, args ...any) (int64, error) {
	var id int64
	var inserted bool
	if err := w.tx.QueryRow(w.ctx, sql, args...).Scan(&id, &inserted); err != nil {
		return 0, fmt.Errorf("%s: %w", table, err)
	}
	if inserted {
		w.new[table]++
	}
	return id, nil
}

// write stores the plan in one transaction and returns what it added: the dataset and
// its files (writeDataset), the certificates (writeCerts), the scans and verification
// runs week by week (writeWeek), the resolvers and their locations (writeResolvers),
// and the misc and performance databases (writeMisc, writePerf).
func (p *plan) write(ctx context.Context, st *store.Store, cfg Config) (*Summary, error) {
	p.mergeMisc()
	sum := &Summary{Vantage: cfg.Vantage, Label: cfg.Label, Files: map[string]int{}, New: map[string]int64{}}
	for _, f := range p.files {
		sum.Files[f.Format]++
	}
	sum.Weeks = p.weekList()
	build := p.latest
	if build.IsZero() {
		build = time.Unix(0, 0).UTC()
	}

	tx, err := st.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit; on failure the first error is returned
	w := &writer{ctx: ctx, tx: tx, new: sum.New}
	if err := w.writeDataset(p, cfg, build, sum); err != nil {
		return nil, err
	}
	ds := sum.DatasetID
	if err := w.writeCerts(p, cfg, ds, build); err != nil {
		return nil, err
	}
	seen := seenDates{first: map[netip.Addr]time.Time{}, last: map[netip.Addr]time.Time{}}
	for _, wk := range sum.Weeks {
		if err := w.writeWeek(p, cfg, ds, p.weeks[wk], seen); err != nil {
			return nil, err
		}
	}
	if err := w.writeResolvers(p, ds, build, seen); err != nil {
		return nil, err
	}
	for _, m := range p.misc {
		if err := w.writeMisc(cfg, ds, m); err != nil {
			return nil, err
		}
	}
	for _, pf := range p.perf {
		if err := w.writePerf(cfg, ds, pf); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return sum, nil
}

// writeDataset stores the vantage point, the dataset (sum.DatasetID; sum.Existed when
// the same files were imported before) and its files.
func (w *writer) writeDataset(p *plan, cfg Config, build time.Time, sum *Summary) error {
	if _, err := w.tx.Exec(w.ctx, `INSERT INTO vantage_points (vantage_id, description) VALUES ($1, $2)
		ON CONFLICT (vantage_id) DO NOTHING`, cfg.Vantage, cfg.Description); err != nil {
		return fmt.Errorf("vantage %s: %w", cfg.Vantage, err)
	}
	var existed bool
	err := w.tx.QueryRow(w.ctx, `INSERT INTO datasets (kind, database_type, build_time, sha256, path, vantage_id, label, source)
		VALUES ('import', 'pam2022-study-files', $1, $2, $3, $4, $5, $3)
		ON CONFLICT (sha256) DO UPDATE SET path = datasets.path
		RETURNING dataset_id, (xmax <> 0)`, build, p.manifest(cfg), cfg.Dir, cfg.Vantage, cfg.Label).Scan(&sum.DatasetID, &existed)
	if err != nil {
		return fmt.Errorf("datasets: %w", err)
	}
	sum.Existed = existed
	if !existed {
		sum.New["datasets"]++
	}
	var files []datasetFile
	for _, f := range p.files {
		files = append(files, datasetFile{sum.DatasetID, f.Path, f.Format, f.SHA256, f.Size, f.Records, f.Detail})
	}
	return insert(w, "dataset_files", files)
}

// writeCerts stores the certificates with their DER (misc: parsed once, deduplicated
// by SHA-256) and every observation of a certificate (misc and certificate CSVs).
func (w *writer) writeCerts(p *plan, cfg Config, ds int64, build time.Time) error {
	var dedup certs.Dedup
	var observed []ObservedCertificate
	for _, m := range p.misc {
		seen := build
		if m.DB.First != nil {
			seen = *m.DB.First
		}
		for _, c := range m.DB.Certs {
			parsed, err := x509.ParseCertificate(c.DER)
			if err != nil {
				return &FileError{Path: m.Path, Where: "table certificates, ip " + c.Addr.String(), Err: malformed("raw is not a DER certificate: %v", err)}
			}
			row := certs.Row(parsed, seen)
			dedup.Add(row)
			observed = append(observed, miscObserved(cfg, ds, m.Week, c, parsed, row))
		}
	}
	if err := insert(w, store.TableCertificates, dedup.Take()); err != nil {
		return err
	}
	for _, c := range p.certCSVs {
		for _, r := range c.Recs {
			observed = append(observed, csvObserved(cfg, ds, c.Week, r))
		}
	}
	return insert(w, "observed_certificates", observed)
}

// miscObserved is the observation of a misc database's certificate c (parsed, and its
// certificates row).
func miscObserved(cfg Config, ds int64, week string, c miscCert, parsed *x509.Certificate, row store.Certificate) ObservedCertificate {
	sum5 := md5.Sum(c.DER)
	size := int32(len(c.DER))
	ver := int16(parsed.Version)
	return ObservedCertificate{VantageID: cfg.Vantage, Label: cfg.Label, ISOWeek: week,
		Address: c.Addr, Protocol: c.Protocol, Port: c.Port, DatasetID: &ds, SHA256: row.SHA256, MD5: sum5[:],
		SubjectCN: parsed.Subject.CommonName, Organization: nonNil(parsed.Subject.Organization),
		DNSNames: nonNil(parsed.DNSNames), AuthorityKeyID: parsed.AuthorityKeyId, SubjectKeyID: parsed.SubjectKeyId,
		DERSize: &size, KeyType: row.KeyType, SignatureAlg: parsed.SignatureAlgorithm.String(), X509Version: &ver}
}

// csvObserved is the observation of a certificate CSV's record r (no DER).
func csvObserved(cfg Config, ds int64, week string, r certRecord) ObservedCertificate {
	size := int32(r.Info.Size)
	ver := int16(r.Info.Version)
	return ObservedCertificate{VantageID: cfg.Vantage, Label: cfg.Label, ISOWeek: week,
		Address: r.Addr, Protocol: r.Protocol, Port: r.Port, DatasetID: &ds, MD5: r.MD5,
		SubjectCN: r.Info.CommonName, Organization: nonNil(r.Info.Organization), DNSNames: nonNil(r.Info.DNSNames),
		AuthorityKeyID: r.AuthorityKey, SubjectKeyID: r.SubjectKey, DERSize: &size,
		KeyType: r.Info.PublicKeyAlgorithm, SignatureAlg: r.Info.SignatureAlgorithm, X509Version: &ver}
}

// seenDates are the first and last dates each verified address was seen.
type seenDates struct {
	first, last map[netip.Addr]time.Time
}

// see records that a was seen at t.
func (s seenDates) see(a netip.Addr, t time.Time) {
	if f, ok := s.first[a]; !ok || t.Before(f) {
		s.first[a] = t
	}
	if t.After(s.last[a]) {
		s.last[a] = t
	}
}

// writeWeek stores a week's scan (if its files had one) and verification run with its
// results, and records in seen when each verified address was seen.
func (w *writer) writeWeek(p *plan, cfg Config, ds int64, wd *weekData, seen seenDates) error {
	var scanID *int64
	if len(wd.Scan) > 0 {
		id, err := w.writeScan(cfg, ds, wd)
		if err != nil {
			return err
		}
		scanID = &id
	}
	if len(wd.Verified) == 0 {
		return nil
	}
	src := "scan"
	if scanID == nil {
		src = "file"
	}
	var geoDS *int64
	if p.locFile != "" {
		geoDS = &ds
	}
	conf, _ := json.Marshal(map[string]any{"verifier": studyVerifier, "dataset_id": ds, "files": wd.Files})
	summary, _ := json.Marshal(map[string]any{"verified": len(wd.Verified), "dataset_id": ds})
	runID, err := w.upsertID("verification_runs", `INSERT INTO verification_runs (iso_week, vantage_id, label, scan_id,
		    source, config, city_dataset, asn_dataset, started_at, finished_at, status, summary)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$7,$8,$8,'ok',$9)
		ON CONFLICT (iso_week, vantage_id, label) DO UPDATE SET label = verification_runs.label
		RETURNING run_id, (xmax = 0)`, wd.Week, cfg.Vantage, cfg.Label, scanID, src, conf, geoDS, wd.Date, summary)
	if err != nil {
		return err
	}
	var rows []store.VerificationResult
	for k, v := range wd.Verified {
		detail := "imported from " + v.Source
		if k.Port == PortUnknown {
			detail += "; port not recorded (784 or 8853)"
		}
		r := store.VerificationResult{RunID: runID, Address: k.Addr, Port: k.Port, Outcome: "doq-verified",
			Detail: detail, ALPN: v.ALPN, QUICVersion: v.Version, Attempts: 1, VerifiedAt: wd.Date}
		if v.Cert != nil {
			r.CertChain = [][]byte{v.Cert}
		}
		rows = append(rows, r)
		seen.see(k.Addr, wd.Date)
	}
	sort.Slice(rows, func(i, j int) bool { return lessKey(rows[i].Address, rows[i].Port, rows[j].Address, rows[j].Port) })
	return insert(w, store.TableVerificationResults, rows)
}

// writeResolvers stores the resolvers (every verified address, and every located one,
// seen at the build time if not verified) and their locations.
func (w *writer) writeResolvers(p *plan, ds int64, build time.Time, seen seenDates) error {
	for _, l := range p.location {
		if _, ok := seen.first[l.Addr]; !ok {
			seen.first[l.Addr], seen.last[l.Addr] = build, build
		}
	}
	var resolvers []store.Resolver
	for a, t := range seen.first {
		resolvers = append(resolvers, store.Resolver{Address: a, FirstSeen: t, LastSeen: seen.last[a]})
	}
	sort.Slice(resolvers, func(i, j int) bool { return resolvers[i].Address.Less(resolvers[j].Address) })
	if err := insert(w, store.TableResolvers, resolvers); err != nil {
		return err
	}
	var geo []store.ResolverGeo
	for _, l := range p.location {
		g := store.ResolverGeo{Address: l.Addr, CityDataset: ds, ASNDataset: ds, ASN: l.ASN,
			Country: strPtr(l.Country), City: strPtr(l.City), Latitude: l.Lat, Longitude: l.Lon}
		if l.ASN != nil {
			g.ASOrg = strPtr(l.ASOrg)
		}
		if c := continentOf(l.Country); c != "" {
			g.Continent = &c
		}
		geo = append(geo, g)
	}
	return insert(w, store.TableResolverGeo, geo)
}

func (w *writer) writeScan(cfg Config, ds int64, wd *weekData) (int64, error) {
	var ports []int32
	for p := range wd.Scan {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
	pv := int64(studyProbeVersion)
	summary, _ := json.Marshal(map[string]any{"dataset_id": ds, "note": "imported: ZMap udp module lists, any UDP answer counted"})
	scanID, err := w.upsertID("scans", `INSERT INTO scans (iso_week, vantage_id, label, ports, probe_version, sender,
		    targets, started_at, finished_at, status, summary)
		VALUES ($1,$2,$3,$4,$5,'zmap','IPv4 internet (imported)',$6,$6,'ok',$7)
		ON CONFLICT (iso_week, vantage_id, label, shard) DO UPDATE SET label = scans.label
		RETURNING scan_id, (xmax = 0)`, wd.Week, cfg.Vantage, cfg.Label, ports, pv, wd.Date, summary)
	if err != nil {
		return 0, err
	}
	for _, port := range ports {
		addrs := wd.Scan[port]
		tag, err := w.tx.Exec(w.ctx, `INSERT INTO scan_runs (scan_id, port, probe_kind, raw_output, started_at,
			    finished_at, status, replies)
			VALUES ($1,$2,'quic-vn',$3,$4,$4,'ok',$5) ON CONFLICT (scan_id, port) DO NOTHING`,
			scanID, port, wd.ScanFiles[port], wd.Date, int64(len(addrs)))
		if err != nil {
			return 0, fmt.Errorf("scan_runs: %w", err)
		}
		w.new["scan_runs"] += tag.RowsAffected()
		rows := make([]store.ScanReply, len(addrs))
		for i, a := range addrs {
			rows[i] = store.ScanReply{ScanID: scanID, Port: port, Address: a, ReplyKind: "udp-reply", ReceivedAt: wd.Date,
				ISOWeek: wd.Week}
		}
		if err := insert(w, store.TableScanReplies, rows); err != nil {
			return 0, err
		}
	}
	return scanID, nil
}

// mergeMisc puts the misc databases' DoQ versions and QUIC certificates on the week's
// verification results (a q_versions row is a DoQ handshake with the ALPN it names).
func (p *plan) mergeMisc() {
	for _, m := range p.misc {
		if m.Week == "" {
			continue
		}
		wd := p.weeks[m.Week]
		if wd == nil {
			d := time.Time{}
			if m.DB.First != nil {
				d = m.DB.First.Truncate(24 * time.Hour)
			}
			if dm := reDate.FindStringSubmatch(m.Path); dm != nil {
				if t, err := fileDate(dm[1]); err == nil {
					d = t
				}
			}
			wd = &weekData{Week: m.Week, Date: d, Scan: map[int32][]netip.Addr{}, ScanFiles: map[int32]string{},
				Verified: map[verKey]*verifiedRecord{}}
			p.weeks[m.Week] = wd
		}
		wd.Files = append(wd.Files, m.Path)
		for _, v := range m.DB.Versions {
			k := verKey{v.Addr, v.Port}
			r := wd.Verified[k]
			if r == nil {
				r = &verifiedRecord{Source: m.Path}
				wd.Verified[k] = r
			}
			ver := v.Version
			r.Version = ver
			if v.ALPN != "" {
				a := v.ALPN
				r.ALPN = &a
			}
		}
		for _, c := range m.DB.Certs {
			if c.Protocol != "quic" {
				continue
			}
			if r := wd.Verified[verKey{c.Addr, c.Port}]; r != nil {
				r.Cert = certs.Fingerprint(c.DER)
			}
		}
	}
}

// writeMisc stores a misc database's support checks as resolver_features of a campaign
// at the hour the checks ran.
func (w *writer) writeMisc(cfg Config, ds int64, m miscFile) error {
	if m.DB.First == nil {
		return nil
	}
	var feats []store.ResolverFeature
	campaign, err := w.campaign(cfg, cfg.Label+"-misc", m.DB.First.Truncate(time.Hour), *m.DB.First, *m.DB.First, ds, m.Path)
	if err != nil {
		return err
	}
	add := func(proto, feature string, s miscSupport) {
		feats = append(feats, store.ResolverFeature{CampaignID: campaign, Address: s.Addr, Protocol: proto, Port: s.Port,
			Feature: feature, Supported: s.Supported, Detail: joinDetail("imported from "+m.Path, s.Detail)})
	}
	for _, s := range m.DB.TFO {
		proto := "dot"
		switch s.Port {
		case 443:
			proto = "doh"
		case 53:
			proto = "dotcp"
		}
		add(proto, "tfo", s)
	}
	for _, s := range m.DB.ZeroRTT {
		add("doq", "0rtt", s)
	}
	for _, s := range m.DB.EDNS {
		s.Port = PortUnknown
		add("dotcp", "edns-tcp-keepalive", s)
	}
	return insert(w, store.TableResolverFeatures, dedupFeatures(feats))
}

func dedupFeatures(in []store.ResolverFeature) []store.ResolverFeature {
	type key struct {
		a    netip.Addr
		p, f string
		port int32
	}
	seen := map[key]bool{}
	var out []store.ResolverFeature
	for _, f := range in {
		k := key{f.Address, f.Protocol, f.Feature, f.Port}
		if !seen[k] {
			seen[k] = true
			out = append(out, f)
		}
	}
	return out
}

func (w *writer) campaign(cfg Config, label string, hour, start, end time.Time, ds int64, file string) (int64, error) {
	conf, _ := json.Marshal(map[string]any{"source": "imported", "dataset_id": ds, "file": file})
	return w.upsertID("campaigns", `INSERT INTO campaigns (vantage_id, label, round_hour, config, started_at,
		    finished_at, status)
		VALUES ($1,$2,$3,$4,$5,$6,'ok')
		ON CONFLICT (vantage_id, label, round_hour) DO UPDATE SET label = campaigns.label
		RETURNING campaign_id, (xmax = 0)`, cfg.Vantage, label, hour.UTC(), conf, start, end)
}

func lessKey(a netip.Addr, p int32, b netip.Addr, q int32) bool {
	if c := a.Compare(b); c != 0 {
		return c < 0
	}
	return p < q
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func int32Ptr(v *int64) *int32 {
	if v == nil {
		return nil
	}
	n := int32(*v)
	return &n
}

func int16Ptr(v *int64) *int16 {
	if v == nil {
		return nil
	}
	n := int16(*v)
	return &n
}
