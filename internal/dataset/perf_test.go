package dataset_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dataset"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// perfSchema is the performance database's schema as the datasets README documents it
// (GORM models of mgranderath/dns-measurements, commit 8abde73); the analysis tests
// read the same file.
const perfSchema = "testdata/perf-schema.sql"

type perfRow struct {
	id                 string
	warm               bool
	ip                 string
	port               int
	proto              string
	created            int64
	tcp, tls, quic, qt int64 // ns
	errText            string
}

// writePerf writes a performance database: the measurements, a traceroute per measured
// id (an intermediate hop, then the destination at rtt), and a qlog per measured QUIC id.
func writePerf(t *testing.T, path string, rows []perfRow, rtt map[string]int64) {
	t.Helper()
	db := openRW(t, path)
	defer db.Close()
	schema, err := os.ReadFile(perfSchema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(schema)); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		null := func(v int64) any {
			if v == 0 {
				return nil
			}
			return v
		}
		_, err := db.Exec(`INSERT INTO dns_measurements (id, cache_warming, ip, port, protocol, created, updated,
			tcp_handshake_duration, tls_handshake_duration, tls_version, q_ui_c_handshake_duration, q_ui_c_version,
			q_ui_c_negotiated_protocol, query_time, total_time, r_code, response_ip, error)
			VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, r.id, r.warm, r.ip, r.port, r.proto, r.created, r.created,
			null(r.tcp), null(r.tls), 772, null(r.quic), 0xff00001d, "doq-i02", r.qt, r.qt+r.tcp+r.tls+r.quic, 0, "1.2.3.4", r.errText)
		if err != nil {
			t.Fatal(err)
		}
		if r.warm {
			continue
		}
		ts := time.Unix(r.created, 0).UTC().Format("2006-01-02 15:04:05.999999999-07:00")
		db.Exec(`INSERT INTO traceroutes VALUES (?,?,1,?,?,?,?,?)`, r.id, ts, r.ip, r.port, "tcp", "10.0.0.1", 1_000_000)
		db.Exec(`INSERT INTO traceroutes VALUES (?,?,2,?,?,?,?,?)`, r.id, ts, r.ip, r.port, "tcp", r.ip, rtt[r.ip])
		if r.proto == "quic" {
			lines, _ := json.Marshal([]any{map[string]any{"qlog_format": "NDJSON", "qlog_version": "draft-02"},
				map[string]any{"time": 0, "name": "transport:packet_sent"}})
			db.Exec(`INSERT INTO q_log_outputs VALUES (?, ?)`, r.id, string(lines))
		}
	}
}

func TestImportPerformanceDatabase(t *testing.T) {
	dir := t.TempDir()
	hour := time.Date(2022, 1, 18, 10, 0, 0, 0, time.UTC).Unix() // 2022-W03
	ms := ms2(hour)
	writePerf(t, filepath.Join(dir, "perf.db"), ms, map[string]int64{"192.0.2.1": 20_000_000, "192.0.2.2": 40_000_000})
	st := storetest.Open(t)
	ctx := context.Background()
	sum, err := dataset.Import(ctx, st, dataset.Config{Dir: dir, Label: "pam2022-w03"})
	if err != nil {
		t.Fatal(err)
	}
	var campaigns, measured, warm, ok int
	err = st.Pool.QueryRow(ctx, `SELECT count(DISTINCT campaign_id), count(*) FILTER (WHERE phase = 'measured'),
		count(*) FILTER (WHERE phase = 'warmup'), count(*) FILTER (WHERE m.status = 'ok')
		FROM measurements m JOIN campaigns c USING (campaign_id) WHERE c.label = 'pam2022-w03'`).Scan(&campaigns, &measured, &warm, &ok)
	if err != nil {
		t.Fatal(err)
	}
	if campaigns != 2 || measured != len(ms)/2 || warm != len(ms)/2 || ok != len(ms)-1 {
		t.Fatalf("campaigns %d measured %d warm-up %d ok %d (rows %d)", campaigns, measured, warm, ok, len(ms))
	}
	// Handshakes by the study's definitions, paired with the destination hop's RTT.
	for _, c := range []struct {
		proto  string
		hs     int64
		rtt    int64
		ip     string
		qlogOK bool
	}{
		{"dotcp", 21_000_000, 20_000_000, "192.0.2.1", false},
		{"dot", 21_000_000 + 22_000_000, 20_000_000, "192.0.2.1", false},
		{"doq", 41_000_000, 40_000_000, "192.0.2.2", true},
	} {
		var hs, rtt int64
		var qlog []byte
		err := st.Pool.QueryRow(ctx, `SELECT m.handshake_ns, s.rtt_ns, q.data FROM measurements m
			JOIN rtt_samples s ON s.campaign_id = m.campaign_id AND s.address = m.address AND s.port = m.port
			     AND s.transport = CASE m.protocol WHEN 'doq' THEN 'quic' WHEN 'doudp' THEN 'udp' ELSE 'tcp' END
			LEFT JOIN qlogs q ON q.qlog_id = m.qlog_id
			WHERE m.protocol = $1 AND m.address = $2 AND m.phase = 'measured' AND m.started_at < $3`,
			c.proto, c.ip, time.Unix(hour+3600, 0)).Scan(&hs, &rtt, &qlog)
		if err != nil {
			t.Fatalf("%s: %v", c.proto, err)
		}
		if hs != c.hs || rtt != c.rtt || (qlog != nil) != c.qlogOK {
			t.Fatalf("%s: handshake %d rtt %d qlog %v; want %d %d %v", c.proto, hs, rtt, qlog != nil, c.hs, c.rtt, c.qlogOK)
		}
		if qlog != nil {
			zr, _ := gzip.NewReader(bytes.NewReader(qlog))
			nd, _ := io.ReadAll(zr)
			if lines := bytes.Count(nd, []byte("\n")); lines != 2 || !bytes.Contains(nd, []byte(`"draft-02"`)) {
				t.Fatalf("qlog: %q", nd)
			}
		}
	}
	var hops int
	st.Pool.QueryRow(ctx, `SELECT count(*) FROM rtt_samples`).Scan(&hops)
	if hops != measured {
		t.Fatalf("%d RTT samples, want one per measured query (%d): only destination hops", hops, measured)
	}
	again, err := dataset.Import(ctx, st, dataset.Config{Dir: dir, Label: "pam2022-w03"})
	if err != nil || !again.Existed {
		t.Fatalf("re-import: %v existed %v", err, again != nil && again.Existed)
	}
	for tb, n := range again.New {
		if n != 0 {
			t.Errorf("re-import added %d rows to %s", n, tb)
		}
	}
	_ = sum
}

// ms2 is two hours of measurements of two resolvers over the five protocols, a warm-up
// and a measured query each; one measured DoUDP query failed.
func ms2(hour int64) []perfRow {
	var out []perfRow
	for h := int64(0); h < 2; h++ {
		for i, ip := range []string{"192.0.2.1", "192.0.2.2"} {
			rtt := int64(20_000_000 * (i + 1))
			for _, p := range []struct {
				proto string
				port  int
			}{{"udp", 53}, {"tcp", 53}, {"tls", 853}, {"https", 443}, {"quic", 784}} {
				for _, warm := range []bool{true, false} {
					r := perfRow{id: ip + p.proto + string(rune('a'+h)), warm: warm, ip: ip, port: p.port, proto: p.proto,
						created: hour + h*3600 + int64(i), qt: rtt + 500_000}
					switch p.proto {
					case "tcp":
						r.tcp = rtt + 1_000_000
					case "tls", "https":
						r.tcp, r.tls = rtt+1_000_000, rtt+2_000_000
					case "quic":
						r.quic = rtt + 1_000_000
					}
					if p.proto == "udp" && h == 1 && i == 1 && !warm {
						r.errText = "timeout"
					}
					out = append(out, r)
				}
			}
		}
	}
	return out
}
