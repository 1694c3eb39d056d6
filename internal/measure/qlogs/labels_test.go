package qlogs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/datasets"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/measure/qlogs"
)

type label struct {
	Success            bool `json:"success"`
	Retry              bool `json:"retry"`
	VersionNegotiation bool `json:"version_negotiation"`
}

// TestSampleAgreesWithLabels: `qlogs analyze` on the study's 174 qlogs of real resolvers
// (quic-go v0.21.2, draft-02 NDJSON) agrees with the study's own labels on every file:
// success = handshake_complete, retry, version_negotiation; and the ODCID is the one in
// the file name (<ip>-<port>-<odcid>.qlog).
func TestSampleAgreesWithLabels(t *testing.T) {
	dir := datasets.Require(t, "dns-analysis-2021/qlog-sample")
	if n := agreeWithLabels(t, dir, filepath.Join(dir, "..", "qlog-sample-labels.json")); n != 174 {
		t.Errorf("%d files analysed, the sample has 174", n)
	}
}

// TestFixturesAgreeWithLabels: the same on the four sample files committed as fixtures
// (runs without the datasets).
func TestFixturesAgreeWithLabels(t *testing.T) {
	dir := "../qlogana/testdata/dns-analysis-2021"
	if n := agreeWithLabels(t, filepath.Join(dir, "qlogs"), filepath.Join(dir, "labels.json")); n != 4 {
		t.Errorf("%d files analysed, want 4", n)
	}
}

// agreeWithLabels runs Analyze on dir and compares every line with the labels file;
// it returns the number of files analysed.
func agreeWithLabels(t *testing.T, dir, labelsFile string) int {
	t.Helper()
	lb, err := os.ReadFile(labelsFile)
	if err != nil {
		t.Fatal(err)
	}
	var labels map[string]map[string]label
	if err := json.Unmarshal(lb, &labels); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := qlogs.Analyze(context.Background(), []string{dir}, 0, &out, discard()); err != nil {
		t.Fatalf("analyze: %v\n%s", err, out.String())
	}
	n, agree := 0, 0
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r qlogs.Report
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		n++
		parts := strings.SplitN(strings.TrimSuffix(filepath.Base(r.File), ".qlog"), "-", 3)
		if len(parts) != 3 {
			t.Errorf("%s: unexpected name", r.File)
			continue
		}
		want, ok := labels[parts[0]][parts[1]]
		if !ok {
			t.Errorf("%s: no label", r.File)
			continue
		}
		if r.Error != nil || r.Findings == nil {
			t.Errorf("%s: %+v", r.File, r.Error)
			continue
		}
		got := label{Success: r.HandshakeComplete, Retry: r.Retry, VersionNegotiation: r.VersionNegotiation}
		if got != want || r.ODCID != parts[2] || r.Format != qlogana.FormatNDJSON {
			t.Errorf("%s: %+v odcid %s format %s; labels %+v", r.File, got, r.ODCID, r.Format, want)
			continue
		}
		agree++
	}
	t.Logf("%d of %d files agree with %s", agree, n, filepath.Base(labelsFile))
	return n
}
