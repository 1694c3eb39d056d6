package qlogana_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/datasets"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// Fixtures: one of today's quic-go (JSON-SEQ) and three of the study's (quic-go v0.21.2,
// draft-02 NDJSON; testdata/dns-analysis-2021/README.md says where they come from).
const (
	sqlogFixture  = "testdata/amplification.sqlog"
	ndjsonRetry   = "testdata/dns-analysis-2021/qlogs/101.132.174.135-784-07b0db12927ba3c514f0f5218c.qlog"
	ndjsonNoReply = "testdata/dns-analysis-2021/qlogs/1.117.174.35-784-54e534ef5cc99100.qlog"
)

func read(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// records splits a JSON-SEQ or NDJSON input into its records.
func records(b []byte) [][]byte {
	var out [][]byte
	for _, r := range bytes.FieldsFunc(b, func(r rune) bool { return r == 0x1e || r == '\n' }) {
		if r = bytes.TrimSpace(r); len(r) > 0 {
			out = append(out, r)
		}
	}
	return out
}

func join(recs [][]byte, before, after string) []byte {
	var out []byte
	for _, r := range recs {
		out = append(append(append(out, before...), r...), after...)
	}
	return out
}

// document writes the records as a qlog JSON document, events as objects or, as
// quic-go v0.1x wrote them, as arrays named by event_fields.
func document(t *testing.T, recs [][]byte, arrays bool) []byte {
	var hdr struct {
		Version string                     `json:"qlog_version"`
		Trace   map[string]json.RawMessage `json:"trace"`
	}
	if err := json.Unmarshal(recs[0], &hdr); err != nil {
		t.Fatal(err)
	}
	var events []any
	for _, r := range recs[1:] {
		var e struct {
			Time json.RawMessage `json:"time"`
			Name string          `json:"name"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(r, &e); err != nil {
			t.Fatal(err)
		}
		if !arrays {
			events = append(events, json.RawMessage(r))
			continue
		}
		cat, ev, _ := strings.Cut(e.Name, ":")
		events = append(events, []any{e.Time, cat, ev, e.Data})
	}
	tr := map[string]any{"common_fields": hdr.Trace["common_fields"], "events": events}
	if arrays {
		tr["event_fields"] = []string{"relative_time", "category", "event", "data"}
	}
	b, err := json.Marshal(map[string]any{"qlog_version": hdr.Version, "title": "test", "traces": []any{tr}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSerialisationsAgree: the same events in every serialisation the reader knows give
// the same trace and the same analysis: one set of rules for every vintage.
func TestSerialisationsAgree(t *testing.T) {
	for _, fixture := range []string{sqlogFixture, ndjsonRetry, ndjsonNoReply} {
		orig := read(t, fixture)
		recs := records(orig)
		strs := make([]string, len(recs))
		for i, r := range recs {
			strs[i] = string(r)
		}
		strArray, _ := json.Marshal(strs)
		type variant struct {
			format string
			b      []byte
		}
		variants := map[string]variant{
			"json-seq":        {qlogana.FormatJSONSeq, join(recs, "\x1e", "\n")},
			"ndjson":          {qlogana.FormatNDJSON, join(recs, "", "\n")},
			"ndjson-crlf":     {qlogana.FormatNDJSON, join(recs, "", "\r\n")},
			"json-array":      {qlogana.FormatJSONArray, append(append([]byte("["), bytes.Join(recs, []byte(",\n"))...), ']')},
			"json-array-strs": {qlogana.FormatJSONArray, strArray},
			"json":            {qlogana.FormatJSON, document(t, recs, false)},
			"json-arrays":     {qlogana.FormatJSON, document(t, recs, true)},
		}
		for name, v := range variants {
			if !strings.HasSuffix(name, "+gzip") {
				variants[name+"+gzip"] = variant{v.format, gz(v.b)}
			}
		}
		ref, err := qlogana.Parse(orig)
		if err != nil {
			t.Fatalf("%s: %v", fixture, err)
		}
		refA, _ := ref.Analyze()
		t.Logf("%s: %s, odcid %s, version %#x: cause %s, %d round trips, complete %v",
			filepath.Base(fixture), ref.Source.Format, ref.Source.ODCID, ref.QUICVersion, refA.Cause, refA.RoundTrips, refA.HandshakeComplete)
		if ref.Source.ODCID == "" || ref.QUICVersion == 0 || ref.Source.Truncated || ref.Source.BadRecords != 0 {
			t.Errorf("%s: source %+v version %#x", fixture, ref.Source, ref.QUICVersion)
		}
		for name, v := range variants {
			tr, err := qlogana.Parse(v.b)
			if err != nil {
				t.Errorf("%s as %s: %v", fixture, name, err)
				continue
			}
			a, _ := tr.Analyze()
			if !reflect.DeepEqual(a, refA) {
				t.Errorf("%s as %s: analysis %+v, want %+v", fixture, name, a, refA)
			}
			wantFormat := v.format
			if tr.Source.Format != wantFormat || tr.Source.Gzip != strings.HasSuffix(name, "+gzip") ||
				tr.Source.ODCID != ref.Source.ODCID || tr.QUICVersion != ref.QUICVersion || tr.Source.Traces != 1 || tr.Source.Truncated {
				t.Errorf("%s as %s: source %+v version %#x, want format %s like %+v", fixture, name, tr.Source, tr.QUICVersion, wantFormat, ref.Source)
			}
		}
	}
}

// TestTruncatedQlogs: an input cut anywhere (a qlog bounded in size, a crash) is read up
// to the cut, marked truncated when the cut is inside a record, and never panics.
func TestTruncatedQlogs(t *testing.T) {
	for _, fixture := range []string{sqlogFixture, ndjsonRetry} {
		full := read(t, fixture)
		ref, _ := qlogana.Analyze(full)
		// Cut inside the last record: everything before it is analysed as before.
		last := bytes.LastIndexAny(bytes.TrimRight(full, "\n"), "\x1e\n")
		cut := full[:last+(len(full)-last)/2]
		tr, err := qlogana.Parse(cut)
		if err != nil {
			t.Fatalf("%s cut: %v", fixture, err)
		}
		a, _ := tr.Analyze()
		if !tr.Source.Truncated || tr.Source.BadRecords != 1 || a.Cause != ref.Cause || a.RoundTrips != ref.RoundTrips || a.HandshakeComplete != ref.HandshakeComplete {
			t.Errorf("%s cut in the last record: source %+v, cause %s/%d, want truncated and %s/%d", fixture, tr.Source, a.Cause, a.RoundTrips, ref.Cause, ref.RoundTrips)
		}
		// The same, compressed and cut inside the gzip stream.
		z := gz(full)
		tr, err = qlogana.Parse(z[:len(z)*2/3])
		if err != nil {
			t.Fatalf("%s gzip cut: %v", fixture, err)
		}
		if !tr.Source.Truncated || !tr.Source.Gzip {
			t.Errorf("%s gzip cut: source %+v", fixture, tr.Source)
		}
		// Every cut: an analysis or a classified error, never a panic.
		for n := 0; n < len(full); n += 53 {
			tr, err := qlogana.Parse(full[:n])
			if err != nil {
				if !errors.Is(err, qlogana.ErrNoHandshake) && !errors.Is(err, qlogana.ErrNotQlog) {
					t.Errorf("%s cut at %d: unclassified error %v", fixture, n, err)
				}
				continue
			}
			if _, err := tr.Analyze(); err != nil {
				t.Errorf("%s cut at %d: %v", fixture, n, err)
			}
		}
	}
}

func TestReadRejectsNonQlogs(t *testing.T) {
	for _, in := range []string{"", "  \n", "hello", "\x1f\x8b", "\x1f\x8bgarbage", "[1,2", "{\"traces\":5}", "[\"x\"]"} {
		_, err := qlogana.Parse([]byte(in))
		if !errors.Is(err, qlogana.ErrNotQlog) && !errors.Is(err, qlogana.ErrNoHandshake) {
			t.Errorf("%q: %v, want a classified error", in, err)
		}
	}
}

// FuzzRead: any bytes, in any of the serialisations, gzip or not: an analysis with a
// format and a cause, or a classified error; never a panic.
func FuzzRead(f *testing.F) {
	for _, p := range []string{sqlogFixture, ndjsonRetry, ndjsonNoReply} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		recs := records(b)
		if len(recs) > 12 {
			recs = recs[:12]
		}
		f.Add(join(recs, "\x1e", "\n"))
		f.Add(join(recs, "", "\n"))
		f.Add(append(append([]byte("["), bytes.Join(recs, []byte(","))...), ']'))
		f.Add(gz(join(recs, "", "\n")))
	}
	f.Add([]byte(`{"qlog_version":"draft-01","traces":[{"common_fields":{"ODCID":"0102","reference_time":"1628606055086","time_format":"delta"},` +
		`"event_fields":["relative_time","category","event","data"],"events":[[0,"transport","packet_sent",{"header":{"packet_type":"initial"},"raw":{"length":1200}}],` +
		`[5,"transport","packet_received",{"header":{"packet_type":"handshake","version":"ff00001d"},"frames":[{"frame_type":"crypto","offset":0,"length":9}]}],` +
		`[1,"security","key_updated",{"key_type":"client_1rtt_secret"}]]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := qlogana.Parse(b)
		if err != nil {
			if !errors.Is(err, qlogana.ErrNoHandshake) && !errors.Is(err, qlogana.ErrNotQlog) && !errors.Is(err, qlogana.ErrTooLarge) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		a, err := tr.Analyze()
		if err != nil || a.Cause == "" || tr.Source.Format == "" {
			t.Fatalf("analysis %+v %v, source %+v", a, err, tr.Source)
		}
	})
}

// BenchmarkAnalyzeFiles: qlog files read and explained per second, on the fixtures and on
// the study's 174-file sample (skipped without the datasets).
func BenchmarkAnalyzeFiles(b *testing.B) {
	b.Run("testdata", func(b *testing.B) {
		benchFiles(b, append(glob(b, "testdata/*.sqlog"), glob(b, "testdata/dns-analysis-2021/qlogs/*.qlog")...))
	})
	b.Run("qlog-sample", func(b *testing.B) {
		dir := datasets.Require(b, "dns-analysis-2021/qlog-sample")
		benchFiles(b, glob(b, filepath.Join(dir, "*.qlog")))
	})
	b.Run("qlog-sample-gzip", func(b *testing.B) {
		dir := datasets.Require(b, "dns-analysis-2021/qlog-sample")
		var zs [][]byte
		for _, f := range glob(b, filepath.Join(dir, "*.qlog")) {
			zs = append(zs, gz(read(b, f)))
		}
		benchBytes(b, zs)
	})
}

func glob(b *testing.B, pattern string) []string {
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) == 0 {
		b.Fatalf("%s: %v, %d files", pattern, err, len(m))
	}
	return m
}

func benchFiles(b *testing.B, files []string) {
	var data [][]byte
	for _, f := range files {
		data = append(data, read(b, f))
	}
	benchBytes(b, data)
}

func benchBytes(b *testing.B, data [][]byte) {
	size := 0
	for _, d := range data {
		size += len(d)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for _, d := range data {
			if _, err := qlogana.Analyze(d); err != nil {
				b.Fatal(err)
			}
		}
	}
	el := time.Since(start)
	fps := float64(b.N*len(data)) / el.Seconds()
	b.ReportMetric(fps, "files/s")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d files (%d bytes) x %d: %.0f files/s, %.1f MB/s", len(data), size, b.N, fps, float64(b.N*size)/el.Seconds()/1e6)
}
