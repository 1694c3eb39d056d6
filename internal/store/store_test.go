package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

func ptr[T any](v T) *T { return &v }

// tableSnapshot is a cheap fingerprint of the whole schema: every column of every table,
// every index and constraint, and the row counts.
func tableSnapshot(t *testing.T, s *store.Store) string {
	t.Helper()
	var out string
	err := s.Pool.QueryRow(context.Background(), `
		SELECT string_agg(x, E'\n' ORDER BY x) FROM (
		  SELECT table_name || '.' || column_name || ':' || data_type || ':' || is_nullable AS x
		    FROM information_schema.columns WHERE table_schema = 'public'
		  UNION ALL SELECT 'index ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
		  UNION ALL SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
		    WHERE connamespace = 'public'::regnamespace
		  UNION ALL SELECT 'migrations ' || count(*) FROM schema_migrations
		) s`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSchemaAppliedTwiceChangesNothing(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	before := tableSnapshot(t, s)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if after := tableSnapshot(t, s); after != before {
		t.Fatalf("schema changed on second apply:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	v, err := s.Version(ctx)
	if err != nil || v != store.SchemaVersion() {
		t.Fatalf("version = %d, %v; want %d", v, err, store.SchemaVersion())
	}
}

func TestSchemaNewerThanBinaryIsRefused(t *testing.T) {
	s, url := storetest.OpenURL(t)
	ctx := context.Background()
	newer := store.SchemaVersion() + 1
	if _, err := s.Pool.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'from the future')`, newer); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := store.Open(ctx, url)
	if !errors.Is(err, store.ErrSchemaNewer) {
		t.Fatalf("Open on a newer schema: err = %v, want ErrSchemaNewer", err)
	}
}

func TestUnreachableDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, url := range []string{"host=/nonexistent-doqscan dbname=x user=x", "postgres://%zz", "not a url ==="} {
		_, err := store.Open(ctx, url)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Open(%q): err = %v, want ErrUnavailable", url, err)
		}
	}
}

// fixture builds one row of every table, linked by their foreign keys.
type fixture struct {
	scanID, runID, campaignID, cityDS, asnDS int64
	replies                                  []store.ScanReply
	certs                                    []store.Certificate
	results                                  []store.VerificationResult
	resolvers                                []store.Resolver
	geo                                      []store.ResolverGeo
	qlogs                                    []store.Qlog
	measurements                             []store.Measurement
	rtts                                     []store.RTTSample
	analyses                                 []store.HandshakeAnalysis
	features                                 []store.ResolverFeature
	optouts                                  []store.OptOutRequest
}

func newFixture(t *testing.T, s *store.Store) *fixture {
	ctx := context.Background()
	f := &fixture{}
	now := time.Date(2026, 11, 16, 10, 0, 0, 0, time.UTC)
	if err := s.EnsureVantage(ctx, store.Vantage{ID: "vp-test", Description: "test"}); err != nil {
		t.Fatal(err)
	}
	var err error
	f.scanID, _, err = s.StartScan(ctx, store.Scan{ISOWeek: "2026-W47", VantageID: "vp-test", Ports: []int32{784, 853},
		ProbeVersion: ptr(int64(0x1a2a3a4a)), Seed: ptr(int64(42))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StartScanRun(ctx, store.ScanRun{ScanID: f.scanID, Port: 784, ProbeKind: "quic-vn", ZmapArgs: []string{"-p", "784"}}); err != nil {
		t.Fatal(err)
	}
	f.cityDS, err = s.EnsureDataset(ctx, store.Dataset{Kind: "geoip-city", DatabaseType: "GeoLite2-City", BuildTime: now, SHA256: make32(1)})
	if err != nil {
		t.Fatal(err)
	}
	f.asnDS, err = s.EnsureDataset(ctx, store.Dataset{Kind: "geoip-asn", DatabaseType: "GeoLite2-ASN", BuildTime: now, SHA256: make32(2)})
	if err != nil {
		t.Fatal(err)
	}
	f.runID, _, err = s.StartVerificationRun(ctx, store.VerificationRun{ISOWeek: "2026-W47", VantageID: "vp-test",
		ScanID: &f.scanID, CityDataset: &f.cityDS, ASNDataset: &f.asnDS})
	if err != nil {
		t.Fatal(err)
	}
	f.campaignID, _, err = s.StartCampaign(ctx, store.Campaign{VantageID: "vp-test", RoundHour: now, RunID: &f.runID})
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddr("198.19.1.2")
	cert := make32(3)
	f.replies = []store.ScanReply{{ScanID: f.scanID, Port: 784, Address: addr, Sport: ptr(int32(784)), ReplyKind: "quic-vn",
		QUICVersions: []int64{1, 0x6b3343cf, 0x1a2a3a4a}, GreaseCount: ptr(int16(1)), VNCIDMatch: ptr(true),
		PayloadLen: ptr(int32(31)), Payload: []byte{0x80, 0, 0, 0, 0}, ReceivedAt: now, ISOWeek: "2026-W47"},
		{ScanID: f.scanID, Port: 53, Address: netip.MustParseAddr("198.19.1.3"), ReplyKind: "dns", DNSRcode: ptr(int16(0)),
			DNSAnswers: ptr(int16(1)), DNSRA: ptr(true), ReceivedAt: now, ISOWeek: "2026-W47"}}
	f.certs = []store.Certificate{{SHA256: cert, DER: []byte{0x30, 0x82}, Subject: "CN=dns.example", SubjectCN: "dns.example",
		SANs: []string{"dns.example", "198.19.1.2"}, Issuer: "CN=Test CA", IssuerCN: "Test CA", Serial: "01",
		NotBefore: ptr(now.Add(-time.Hour)), NotAfter: ptr(now.Add(time.Hour)), KeyType: "ecdsa", KeyBits: ptr(int32(256)),
		SignatureAlg: "ECDSA-SHA256", FirstSeen: now}}
	f.results = []store.VerificationResult{{RunID: f.runID, Address: addr, Port: 784, Outcome: "doq-verified",
		QUICVersion: ptr(int64(1)), ALPN: ptr("doq"), TLSVersion: ptr(int32(0x0304)), TLSCipher: ptr("TLS_AES_128_GCM_SHA256"),
		HandshakeNS: ptr(int64(40_000_000)), SNISource: ptr("none"), CertValidForSNI: ptr(false), CertChain: [][]byte{cert},
		ScanVersions: []int64{1, 0x6b3343cf}, DNSRcode: ptr(int16(0)), DNSAnswers: ptr(int16(1)), Attempts: 1, VerifiedAt: now}}
	f.resolvers = []store.Resolver{{Address: addr, FirstSeen: now, LastSeen: now}}
	f.geo = []store.ResolverGeo{{Address: addr, CityDataset: f.cityDS, ASNDataset: f.asnDS, ASN: ptr(int64(64500)),
		ASOrg: ptr("Example AS"), Country: ptr("DE"), Continent: ptr("EU"), City: ptr("Munich"),
		Latitude: ptr(48.1), Longitude: ptr(11.6)}}
	key := store.MeasurementKey{CampaignID: f.campaignID, Address: addr, Protocol: "doq", Port: 784, Mode: "fresh",
		KeyShare: "x25519", Phase: "measured"}
	qid := key.QlogID()
	f.qlogs = []store.Qlog{{QlogID: qid, CampaignID: f.campaignID, Address: addr, Port: 784, ODCID: []byte{1, 2, 3, 4},
		Encoding: "gzip", Format: "sqlog", RawSize: 100, Data: []byte{0x1f, 0x8b}, CreatedAt: now, Truncated: true, RoundHour: now}}
	f.measurements = []store.Measurement{{MeasurementID: key.ID(), CampaignID: f.campaignID, Address: addr, Protocol: "doq",
		Port: 784, Mode: "fresh", KeyShare: "x25519", Phase: "measured", StartedAt: now,
		HandshakeNS: ptr(int64(41_000_000)), ResolveNS: ptr(int64(40_500_000)), Status: "ok", Rcode: ptr(int16(0)),
		Answers: []string{"198.51.100.1"}, TLSVersion: ptr(int32(0x0304)), QUICVersion: ptr(int64(1)), ALPN: ptr("doq"),
		TokenReceived: ptr(true), TokenUsed: ptr(true), RetrySeen: ptr(false), VNSeen: ptr(false), Resumed: ptr(false),
		Used0RTT: ptr(false), QlogID: &qid, RoundHour: now}}
	f.rtts = []store.RTTSample{{CampaignID: f.campaignID, Address: addr, Transport: "quic", Port: 784, Seq: 0, SentAt: now,
		RTTNS: ptr(int64(40_100_000)), Status: "ok", RoundHour: now}}
	f.analyses = []store.HandshakeAnalysis{{MeasurementID: key.ID(), RTTNS: ptr(int64(40_100_000)), Ratio: ptr(float32(1.02)),
		RoundTrips: ptr(int16(1)), OneRTT: true, Cause: "1rtt", Detail: []byte(`{"packets": 4}`), RoundHour: now}}
	f.features = []store.ResolverFeature{{CampaignID: f.campaignID, Address: addr, Protocol: "doq", Port: 784, Feature: "0rtt",
		Supported: ptr(false)}}
	f.optouts = []store.OptOutRequest{{Prefix: netip.MustParsePrefix("198.19.200.0/24"), Email: "noc@example.net",
		Note: "please", SourceAddr: ptr(netip.MustParseAddr("198.18.0.2")), Status: "accepted", CreatedAt: now}}
	return f
}

func make32(b byte) []byte {
	out := make([]byte, 32)
	for i := range out {
		out[i] = b
	}
	return out
}

// fixtureTable is one table of the fixture: its rows written with store.Insert and read
// back with roundTrip.
type fixtureTable struct {
	name      string
	insert    func(ctx context.Context, s *store.Store) (int64, error)
	roundTrip func(t *testing.T, s *store.Store)
}

func tableOf[T any](name string, rows []T) fixtureTable {
	return fixtureTable{name: name,
		insert:    func(ctx context.Context, s *store.Store) (int64, error) { return store.Insert(ctx, s, name, rows) },
		roundTrip: func(t *testing.T, s *store.Store) { t.Helper(); roundTrip(t, s, name, rows) }}
}

// tables are the fixture's tables in dependency order.
func (f *fixture) tables() []fixtureTable {
	return []fixtureTable{
		tableOf(store.TableScanReplies, f.replies),
		tableOf(store.TableCertificates, f.certs),
		tableOf(store.TableVerificationResults, f.results),
		tableOf(store.TableResolvers, f.resolvers),
		tableOf(store.TableResolverGeo, f.geo),
		tableOf(store.TableQlogs, f.qlogs),
		tableOf(store.TableMeasurements, f.measurements),
		tableOf(store.TableRTTSamples, f.rtts),
		tableOf(store.TableHandshakeAnalyses, f.analyses),
		tableOf(store.TableResolverFeatures, f.features),
		tableOf(store.TableOptOutRequests, f.optouts),
	}
}

// insertAll writes the fixture in dependency order and returns the rows added per table.
func insertAll(t *testing.T, s *store.Store, f *fixture) map[string]int64 {
	ctx := context.Background()
	n := map[string]int64{}
	for _, tb := range f.tables() {
		c, err := tb.insert(ctx, s)
		if err != nil {
			t.Fatalf("%s: %v", tb.name, err)
		}
		n[tb.name] = c
	}
	return n
}

func roundTrip[T any](t *testing.T, s *store.Store, table string, want []T) {
	t.Helper()
	got, err := store.SelectTable[T](context.Background(), s, table, "1")
	if err != nil {
		t.Fatalf("read back %s: %v", table, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: read %d rows, wrote %d", table, len(got), len(want))
	}
	// The table's natural order is not the insert order for every table: match by value.
	for _, w := range want {
		found := false
		for _, g := range got {
			if reflect.DeepEqual(normalize(g), normalize(w)) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: row not read back identically:\nwrote %+v\nread  %+v", table, w, got)
		}
	}
}

// normalize makes times comparable (PostgreSQL keeps microseconds, in UTC).
func normalize(v any) any {
	rv := reflect.ValueOf(v)
	out := reflect.New(rv.Type()).Elem()
	out.Set(rv)
	for i := 0; i < out.NumField(); i++ {
		f := out.Field(i)
		switch x := f.Interface().(type) {
		case time.Time:
			f.Set(reflect.ValueOf(x.UTC().Truncate(time.Microsecond)))
		case *time.Time:
			if x != nil {
				y := x.UTC().Truncate(time.Microsecond)
				f.Set(reflect.ValueOf(&y))
			}
		}
	}
	return out.Interface()
}

func TestCopyRoundTripEveryTable(t *testing.T) {
	s := storetest.Open(t)
	f := newFixture(t, s)
	added := insertAll(t, s, f)
	for table, n := range added {
		if n < 1 {
			t.Errorf("%s: no row added", table)
		}
	}
	for _, tb := range f.tables() {
		tb.roundTrip(t, s)
	}
}

func TestReinsertAddsNothing(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	f := newFixture(t, s)
	insertAll(t, s, f)
	counts := func() string {
		var out string
		err := s.Pool.QueryRow(ctx, `SELECT concat_ws(',',
			(SELECT count(*) FROM scans), (SELECT count(*) FROM scan_runs), (SELECT count(*) FROM scan_replies),
			(SELECT count(*) FROM verification_runs), (SELECT count(*) FROM verification_results),
			(SELECT count(*) FROM certificates), (SELECT count(*) FROM resolvers), (SELECT count(*) FROM resolver_geo),
			(SELECT count(*) FROM datasets), (SELECT count(*) FROM campaigns), (SELECT count(*) FROM qlogs),
			(SELECT count(*) FROM measurements), (SELECT count(*) FROM rtt_samples),
			(SELECT count(*) FROM handshake_analyses), (SELECT count(*) FROM resolver_features),
			(SELECT count(*) FROM optout_requests), (SELECT count(*) FROM vantage_points))`).Scan(&out)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := counts()
	// A re-run starts the same runs again (same natural keys) and writes the same rows.
	g := newFixture(t, s)
	if g.scanID != f.scanID || g.runID != f.runID || g.campaignID != f.campaignID || g.cityDS != f.cityDS {
		t.Fatalf("re-run got new run ids: scan %d->%d run %d->%d campaign %d->%d", f.scanID, g.scanID, f.runID, g.runID,
			f.campaignID, g.campaignID)
	}
	added := insertAll(t, s, g)
	for table, n := range added {
		if n != 0 {
			t.Errorf("%s: re-insert added %d rows", table, n)
		}
	}
	if after := counts(); after != before {
		t.Fatalf("row counts changed: %s -> %s", before, after)
	}
}

func TestParentChecksAndCascade(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	f := newFixture(t, s)
	insertAll(t, s, f)
	orphan := f.measurements[0]
	orphan.CampaignID = f.campaignID + 1000
	orphan.MeasurementID = [16]byte{1}
	orphan.QlogID = nil
	if _, err := store.Insert(ctx, s, store.TableMeasurements, []store.Measurement{orphan}); err == nil {
		t.Fatal("measurement of a missing campaign was accepted")
	}
	badQlog := f.measurements[0]
	badQlog.MeasurementID = [16]byte{2}
	badQlog.QlogID = &[16]byte{3}
	if _, err := store.Insert(ctx, s, store.TableMeasurements, []store.Measurement{badQlog}); err == nil {
		t.Fatal("measurement with a missing qlog was accepted")
	}
	replyOrphan := f.replies[0]
	replyOrphan.ScanID = f.scanID + 1000
	if _, err := store.Insert(ctx, s, store.TableScanReplies, []store.ScanReply{replyOrphan}); err == nil {
		t.Fatal("reply of a missing scan was accepted")
	}
	rttOrphan := f.rtts[0]
	rttOrphan.CampaignID = f.campaignID + 1000
	if _, err := store.Insert(ctx, s, store.TableRTTSamples, []store.RTTSample{rttOrphan}); err == nil {
		t.Fatal("RTT sample of a missing campaign was accepted")
	}
	if _, err := s.Pool.Exec(ctx, "DELETE FROM campaigns WHERE campaign_id = $1", f.campaignID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool.Exec(ctx, "DELETE FROM scans WHERE scan_id = $1", f.scanID); err == nil {
		t.Fatal("deleted a scan that a verification run references")
	}
	var left int
	s.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM measurements) + (SELECT count(*) FROM rtt_samples) +
		(SELECT count(*) FROM handshake_analyses) + (SELECT count(*) FROM qlogs)`).Scan(&left)
	if left != 0 {
		t.Fatalf("%d rows of a deleted campaign are left", left)
	}
}

func TestMeasurementIDsAreStable(t *testing.T) {
	k := store.MeasurementKey{CampaignID: 7, Address: netip.MustParseAddr("198.19.0.1"), Protocol: "doq", Port: 853,
		Mode: "fresh", Phase: "warmup"}
	a, b := k.ID(), k.ID()
	if a != b {
		t.Fatal("same key, different ids")
	}
	k2 := k
	k2.Phase = "measured"
	if k2.ID() == a || k.QlogID() == a {
		t.Fatal("different keys share an id")
	}
	if a[6]>>4 != 5 || a[8]>>6 != 2 {
		t.Fatalf("not an RFC 9562 UUIDv5: %s", store.UUIDString(a))
	}
}

// BenchmarkCopyMeasurements prints COPY throughput for measurement rows (goal: at least
// 100,000 rows/s). Each iteration loads a batch of 50,000 new rows.
func BenchmarkCopyMeasurements(b *testing.B) {
	s := storetest.OpenVantage(b, "bench")
	ctx := context.Background()
	const batch = 50_000
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var total int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		hour := base.Add(time.Duration(i) * time.Hour)
		cid, _, err := s.StartCampaign(ctx, store.Campaign{VantageID: "bench", RoundHour: hour})
		if err != nil {
			b.Fatal(err)
		}
		rows := make([]store.Measurement, batch)
		for j := range rows {
			addr := netip.AddrFrom4([4]byte{198, 19, byte(j >> 8), byte(j)})
			proto := []string{"doudp", "dotcp", "dot", "doh", "doq"}[j%5]
			k := store.MeasurementKey{CampaignID: cid, Address: addr, Protocol: proto, Port: 853, Mode: "fresh",
				Phase: []string{"warmup", "measured"}[(j/5)%2], Seq: int16(j / 10 / 65536)}
			k.Address = netip.AddrFrom4([4]byte{198, 19, byte(j / 10 >> 8), byte(j / 10)})
			rows[j] = store.Measurement{MeasurementID: k.ID(), CampaignID: cid, Address: k.Address, Protocol: proto,
				Port: 853, Mode: "fresh", Phase: k.Phase, Seq: k.Seq, StartedAt: base, HandshakeNS: ptr(int64(j)),
				ResolveNS: ptr(int64(j)), Status: "ok", Rcode: ptr(int16(0)), Answers: []string{"198.51.100.1"},
				TLSVersion: ptr(int32(0x0304)), ALPN: ptr("doq"), RoundHour: hour}
			_ = addr
		}
		b.StartTimer()
		n, err := store.InsertParallel(ctx, s, store.TableMeasurements, rows, 2)
		if err != nil {
			b.Fatal(err)
		}
		if n != batch {
			b.Fatalf("inserted %d of %d", n, batch)
		}
		total += n
	}
	rate := float64(total) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "rows/s")
	b.ReportMetric(rate/100_000, "x_goal")
	fmt.Printf("COPY measurements: %d rows in %v = %.0f rows/s (goal 100000/s, ratio %.2f)\n",
		total, b.Elapsed().Round(time.Millisecond), rate, rate/100_000)
}
