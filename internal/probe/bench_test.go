package probe

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/benchpool"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// IngestGoal is the ingest rate the scan needs so that ingest never limits zmap
// replies per second through CSV parser and classifier.
const IngestGoal = 200_000

// syntheticCSV returns n zmap CSV lines (header first) built from the recorded VN and
// DNS replies with distinct addresses, mixing in a few ICMP lines.
func syntheticCSV(tb testing.TB, n int) []byte {
	vn := recordedLine(tb, "testdata/zmap/quic-784.csv")
	icmp := recordedLine(tb, "testdata/zmap/icmp-9999.csv")
	var b bytes.Buffer
	b.WriteString(strings.Join(ZmapFields, ",") + "\n")
	for i := 0; i < n; i++ {
		a := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		line := vn
		if i%20 == 19 {
			line = icmp
		}
		_, rest, _ := strings.Cut(line, ",")
		fmt.Fprintf(&b, "%s,%s\n", a, rest)
	}
	return b.Bytes()
}

func recordedLine(tb testing.TB, path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return strings.Split(string(raw), "\n")[1]
}

// bench runs f b.N times and reports the rate per wall-clock second and per CPU second
// (all of the process's threads, GC included) and its ratio to the ingest goal.
func bench(b *testing.B, perOp int, name string, f func()) {
	b.ResetTimer()
	c0 := benchpool.CPUTime()
	for i := 0; i < b.N; i++ {
		f()
	}
	cpu := benchpool.CPUTime() - c0
	b.StopTimer()
	n := float64(b.N * perOp)
	b.ReportMetric(n/b.Elapsed().Seconds(), name+"/s")
	if cpu > 0 {
		b.ReportMetric(n/cpu.Seconds(), name+"/cpu_s")
		b.ReportMetric(n/cpu.Seconds()/IngestGoal, "x_goal_cpu")
	}
	b.ReportMetric(n/b.Elapsed().Seconds()/IngestGoal, "x_goal_wall")
}

// BenchmarkIngestCSV: zmap CSV line -> Reply -> classification -> counted (no database).
func BenchmarkIngestCSV(b *testing.B) {
	benchIngest(b, func(data []byte, in *Ingest) error {
		return IngestCSV(context.Background(), bytes.NewReader(data), 784, in)
	})
}

// BenchmarkStreamCSV is IngestCSV through the streaming path zmap's stdout takes
// (reader goroutine, channel, raw copy).
func BenchmarkStreamCSV(b *testing.B) {
	benchIngest(b, func(data []byte, in *Ingest) error {
		var raw bytes.Buffer
		return StreamCSV(context.Background(), bytes.NewReader(data), &raw, 784, in, time.Second)
	})
}

// BenchmarkIngestStreamFile is StreamCSV with the raw copy going to a real file (what a
// scan does): the cost of keeping the raw file current on disk.
func BenchmarkIngestStreamFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "784.csv")
	benchIngest(b, func(data []byte, in *Ingest) error {
		raw, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer raw.Close()
		// zmap's output arrives in pieces of at most 4 KiB (a pipe read of its stdio buffer).
		return StreamCSV(context.Background(), &pieces{data, 4096}, raw, 784, in, time.Second)
	})
}

// benchIngest measures ingest (run, into a fresh Ingest) of 65536 synthetic reply lines;
// an error or a lost reply fails the benchmark.
func benchIngest(b *testing.B, run func(data []byte, in *Ingest) error) {
	const n = 65536
	data := syntheticCSV(b, n)
	c := testClassifier(b)
	bench(b, n, "replies", func() {
		in := NewIngest(nil, 0, c, nil)
		if err := run(data, in); err != nil || in.Replies != n {
			b.Fatal(err, in.Replies)
		}
	})
}

// pieces reads b in reads of at most n bytes.
type pieces struct {
	b []byte
	n int
}

func (p *pieces) Read(out []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	k := copy(out[:min(len(out), p.n)], p.b)
	p.b = p.b[k:]
	return k, nil
}

// BenchmarkClassifyVN: the classifier alone on a real quic-go VN packet.
func BenchmarkClassifyVN(b *testing.B) {
	pkt, err := os.ReadFile("testdata/vn/quic-go-1a2a3a4a.bin")
	if err != nil {
		b.Fatal(err)
	}
	c := testClassifier(b)
	r := Reply{Addr: netip.MustParseAddr("198.19.0.1"), Port: 853, Sport: 853, Payload: pkt, ICMPType: -1}
	bench(b, 1, "replies", func() {
		if c.Classify(r).Kind != KindQUICVN {
			b.Fatal("not vn")
		}
	})
}

// BenchmarkParseVN: the VN parser alone.
func BenchmarkParseVN(b *testing.B) {
	pkt, err := os.ReadFile("testdata/vn/quic-go-1a2a3a4a.bin")
	if err != nil {
		b.Fatal(err)
	}
	bench(b, 1, "packets", func() {
		if _, err := ParseVN(pkt); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkIngestDB: the whole ingest, CSV to rows committed in PostgreSQL (COPY in
// batches of DefaultBatch), into a fresh scan each iteration.
func BenchmarkIngestDB(b *testing.B) {
	const n = 65536
	data := syntheticCSV(b, n)
	s := storetest.Open(b)
	ctx := context.Background()
	c := testClassifier(b)
	if _, err := s.Pool.Exec(ctx, "INSERT INTO vantage_points (vantage_id) VALUES ('bench')"); err != nil {
		b.Fatal(err)
	}
	i := 0
	bench(b, n, "replies", func() {
		var id int64
		i++
		if err := s.Pool.QueryRow(ctx, `INSERT INTO scans (iso_week, vantage_id, label, ports) VALUES ('2026-W47','bench',$1,'{784}') RETURNING scan_id`,
			fmt.Sprintf("b%d-%d", b.N, i)).Scan(&id); err != nil {
			b.Fatal(err)
		}
		in := NewIngest(s, id, c, nil)
		if err := IngestCSV(ctx, bytes.NewReader(data), 784, in); err != nil || in.Inserted != n {
			b.Fatal(err, in.Inserted)
		}
	})
}
