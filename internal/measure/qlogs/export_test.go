package qlogs_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/measure/qlogs"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestExportWritesWhatQvisOpens: a round against a v2-only DoQ server (its warm-up gets
// Version Negotiation: two traces in one stored qlog) is exported; every single-trace
// qlog becomes a .sqlog identical to what quic-go wrote, the VN one a .qlog JSON document
// with both traces, and analysing each file gives what analysing the stored qlog gives.
// Exporting again rewrites the same files.
func TestExportWritesWhatQvisOpens(t *testing.T) {
	s := storetest.OpenVantage(t, "test")
	ctx := context.Background()
	srv := measuretest.Start(t, measuretest.Config{Host: "127.0.0.15", QUICVersions: []quic.Version{quic.Version2}})
	targets := []campaign.Target{{Addr: netip.MustParseAddr("127.0.0.15"), Endpoints: []campaign.Endpoint{
		{Protocol: measure.DoQ, Port: srv.DoQ.Port(), ALPN: "doq"}}}}
	hour := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	cfg := campaign.Config{VantageID: "test", Label: "export", Hour: hour, Timeout: 2 * time.Second, Concurrency: 1,
		Protocols: []measure.Protocol{measure.DoQ}, RTTSamples: 1, RTTTimeout: 300 * time.Millisecond}
	sum, err := campaign.Run(ctx, s, cfg, targets, discard())
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string][]byte{} // odcid -> qlog as stored
	rows, err := s.Pool.Query(ctx, `SELECT odcid, data FROM qlogs WHERE campaign_id = $1`, sum.CampaignID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var odcid, data []byte
		if err := rows.Scan(&odcid, &data); err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(zr)
		stored[hex.EncodeToString(odcid)] = raw
	}
	rows.Close()
	if len(stored) != 2 {
		t.Fatalf("%d stored qlogs, want warm-up and measured", len(stored))
	}

	dir := t.TempDir()
	// By (vantage, label, hour), as `qlogs export --hour` does.
	files, err := qlogs.Export(ctx, s, qlogs.ExportConfig{Vantage: "test", Label: "export", Hour: hour, Out: dir}, discard())
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var exts []string
	for _, f := range files {
		base := filepath.Base(f)
		ext := filepath.Ext(base)
		exts = append(exts, strings.TrimSuffix(base, ext)[strings.LastIndex(base, "-")+1:]+ext)
		parts := strings.Split(strings.TrimSuffix(base, ext), "-")
		odcid, phase := parts[len(parts)-1], parts[len(parts)-2]
		raw, ok := stored[odcid]
		if !ok || !strings.HasPrefix(base, "127.0.0.15-") {
			t.Errorf("%s: name does not match a stored qlog (%v)", base, ok)
			continue
		}
		got, _ := os.ReadFile(f)
		wantExt := ".sqlog"
		if phase == "warmup" {
			wantExt = ".qlog" // VN: two traces, one JSON document
		}
		if ext != wantExt {
			t.Errorf("%s: %s file, want %s", base, ext, wantExt)
		}
		if ext == ".sqlog" && !bytes.Equal(got, raw) {
			t.Errorf("%s: not the stored qlog byte for byte", base)
		}
		want, err := qlogana.Analyze(raw)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := qlogana.Parse(got)
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		a, _ := tr.Analyze()
		if !reflect.DeepEqual(a, want) {
			t.Errorf("%s: analysis %+v, the stored qlog's %+v", base, a, want)
		}
		r := qlogs.AnalyzeFile(f, 0)
		t.Logf("%s: format %s traces %d cause %s trips %d vn %v", base, r.Format, r.Traces, r.Cause, r.RoundTrips, r.VersionNegotiation)
		if phase == "warmup" && (!r.VersionNegotiation || r.Traces != 2 || r.Format != qlogana.FormatJSON || r.ODCID != odcid) {
			t.Errorf("%s: %+v %+v", base, r, r.Findings)
		}
	}
	if len(files) != 2 {
		t.Fatalf("exported %v", exts)
	}
	// Again: the same files, nothing else in the directory.
	again, err := qlogs.Export(ctx, s, qlogs.ExportConfig{CampaignID: sum.CampaignID, Out: dir}, discard())
	sort.Strings(again)
	entries, _ := os.ReadDir(dir)
	if err != nil || !reflect.DeepEqual(again, files) || len(entries) != len(files) {
		t.Errorf("export again: %v %v, %d entries", again, err, len(entries))
	}
}

func TestRunClassifiesBadRequests(t *testing.T) {
	ctx := context.Background()
	out := io.Discard
	for _, c := range []struct {
		name string
		run  func(context.Context, qlogs.Config, io.Writer, *slog.Logger) error
		cfg  qlogs.Config
		code int
	}{
		{"analyze without files", qlogs.RunAnalyze, qlogs.Config{}, cli.ExitUsage},
		{"export without --out", qlogs.RunExport, qlogs.Config{Export: qlogs.ExportConfig{CampaignID: 1}}, cli.ExitUsage},
		{"export with two campaigns", qlogs.RunExport, qlogs.Config{Hour: "2026-11-22T04", Export: qlogs.ExportConfig{CampaignID: 1, Out: "x"}}, cli.ExitUsage},
		{"export without campaign", qlogs.RunExport, qlogs.Config{Export: qlogs.ExportConfig{Out: "x"}}, cli.ExitUsage},
		{"export with a bad hour", qlogs.RunExport, qlogs.Config{Hour: "yesterday", Export: qlogs.ExportConfig{Out: "x"}}, cli.ExitUsage},
		{"export with files", qlogs.RunExport, qlogs.Config{Paths: []string{"x.qlog"}, Export: qlogs.ExportConfig{CampaignID: 1, Out: "x"}}, cli.ExitUsage},
		{"missing file", qlogs.RunAnalyze, qlogs.Config{Paths: []string{"/nonexistent/x.qlog"}}, cli.ExitEnvironment},
		{"not a qlog", qlogs.RunAnalyze, qlogs.Config{Paths: []string{"export_test.go"}}, cli.ExitFailure},
		{"fixtures", qlogs.RunAnalyze, qlogs.Config{Paths: []string{"../qlogana/testdata/dns-analysis-2021/qlogs", "../qlogana/testdata/normal.sqlog"}}, cli.ExitOK},
	} {
		if got := cli.ExitCode(c.run(ctx, c.cfg, out, discard())); got != c.code {
			t.Errorf("%s: exit code %d, want %d", c.name, got, c.code)
		}
	}
}

func TestExportOfAMissingCampaignIsABadArgument(t *testing.T) {
	s := storetest.Open(t)
	_, err := qlogs.Export(context.Background(), s, qlogs.ExportConfig{CampaignID: 424242, Out: t.TempDir()}, discard())
	if !errors.Is(err, qlogs.ErrNoCampaign) {
		t.Fatalf("export of a missing campaign: %v", err)
	}
}
