package optout

import (
	"html"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/release/manifest"
)

// TestPageSaysWhatIsPublished: with no release the page says no per-address data has
// been released; once a release exists (its manifest, as dataset export writes it) it
// says truthfully what is published per address, which weeks and vantage points, where,
// and that honoured opt-outs are left out of every release written after them.
func TestPageSaysWhatIsPublished(t *testing.T) {
	dir := t.TempDir()
	srv := &Server{BlocklistDir: t.TempDir(), Info: DefaultInfo, Log: quiet, ReleaseDir: dir,
		ReleaseURL: "https://data.example.org/doqscan/"}
	srv.Store = countedStoreOnly(t)
	_, body := getPage(t, srv)
	body = html.UnescapeString(body)
	if !strings.Contains(body, "no per-address data has been released") {
		t.Errorf("without a release the page does not say that nothing per address is published")
	}
	if strings.Contains(body, "Parquet") {
		t.Errorf("without a release the page claims a release")
	}

	m := &manifest.Manifest{SchemaVersion: manifest.SchemaVersion, UpdatedAt: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)}
	for _, fs := range []manifest.FileSet{{ISOWeek: "2021-W24", Vantage: "pam2022-tum"}, {ISOWeek: "2026-W47", Vantage: "vp0"},
		{ISOWeek: "2026-W48", Vantage: manifest.BenchmarksVantage}} {
		fs.Files = []manifest.File{{Path: fs.ISOWeek + "/" + fs.Vantage + "/measurements.parquet", Table: "measurements"}}
		m.Put(fs)
	}
	if err := manifest.Write(dir, m); err != nil {
		t.Fatal(err)
	}
	_, body = getPage(t, srv)
	body = html.UnescapeString(body)
	for _, w := range []string{"per-address data, as Parquet files", "weeks 2021-W24 to 2026-W47",
		"vantage point(s) pam2022-tum, vp0", "last updated 2026-11-27", "published at https://data.example.org/doqscan/",
		"left out of every release written after the opt-out", "no data about it is collected from then on"} {
		if !strings.Contains(strings.Join(strings.Fields(body), " "), w) {
			t.Errorf("with a release the page lacks %q", w)
		}
	}
	if strings.Contains(body, "no per-address data has been released") {
		t.Errorf("with a release the page still says nothing is released")
	}
	srv.ReleaseURL = ""
	_, body = getPage(t, srv)
	if !strings.Contains(strings.Join(strings.Fields(html.UnescapeString(body)), " "), "published on request from "+DefaultInfo.Contact) {
		t.Errorf("without a URL the page does not say the release is on request")
	}
}
