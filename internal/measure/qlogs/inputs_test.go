package qlogs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
	"github.com/doqscan/doqscan/internal/measure/qlogs"
)

const fixtures = "../qlogana/testdata/dns-analysis-2021/qlogs"

// analyzeLines runs Analyze on paths and returns its lines and error.
func analyzeLines(t *testing.T, paths ...string) ([]qlogs.Report, error) {
	t.Helper()
	var out bytes.Buffer
	err := qlogs.Analyze(context.Background(), paths, 0, &out, discard())
	var rs []qlogs.Report
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r qlogs.Report
		if derr := dec.Decode(&r); derr != nil {
			t.Fatal(derr)
		}
		rs = append(rs, r)
	}
	return rs, err
}

// TestAnalyzeInputsNeverHangOrVanish: a FIFO among the files is one unreadable line
// saying what it is (its open used to wait for a writer forever, and the files after it
// were never read); the files after it are analysed. A link to a directory is read like
// the directory, with or without a trailing slash (without one it printed nothing and
// exited 0). A link to nothing and a directory without files are each an unreadable
// line, never nothing. Every case that could not read a path is ErrUnreadable (exit 5).
func TestAnalyzeInputsNeverHangOrVanish(t *testing.T) {
	ents, err := os.ReadDir(fixtures)
	if err != nil || len(ents) < 2 {
		t.Fatalf("fixtures: %v, %d files", err, len(ents))
	}
	good, good2 := filepath.Join(fixtures, ents[0].Name()), filepath.Join(fixtures, ents[1].Name())
	dir := t.TempDir()
	fifo := listfiletest.FIFO(t, dir, "pipe.sqlog")

	rs, err := analyzeLines(t, good, fifo, good2)
	if !errors.Is(err, qlogs.ErrUnreadable) || len(rs) != 3 {
		t.Fatalf("good, FIFO, good2: %v, %d lines; want %v and 3 lines", err, len(rs), qlogs.ErrUnreadable)
	}
	if rs[0].Error != nil || rs[2].Error != nil || rs[2].File != good2 || rs[2].Findings == nil {
		t.Errorf("the files around the FIFO: %+v, %+v", rs[0], rs[2])
	}
	if e := rs[1].Error; rs[1].File != fifo || e == nil || e.Class != qlogs.ClassUnreadable || !strings.Contains(e.Message, "named pipe") {
		t.Errorf("FIFO line: %+v %+v, want class %s naming a named pipe", rs[1], e, qlogs.ClassUnreadable)
	}

	abs, err := filepath.Abs(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	link := listfiletest.Symlink(t, abs, filepath.Join(dir, "link"))
	for _, p := range []string{link, link + "/"} {
		rs, err := analyzeLines(t, p)
		if err != nil || len(rs) != len(ents) {
			t.Errorf("%s: %v, %d lines; want %d analysed files", p, err, len(rs), len(ents))
			continue
		}
		for _, r := range rs {
			if r.Error != nil || !strings.HasPrefix(r.File, filepath.Clean(link)) {
				t.Errorf("%s: %+v", p, r)
			}
		}
	}

	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	dangling := listfiletest.Symlink(t, filepath.Join(dir, "absent.sqlog"), filepath.Join(dir, "dangling.sqlog"))
	for _, c := range []struct{ path, want string }{{empty, "without any file"}, {dangling, "link to nothing"}} {
		rs, err := analyzeLines(t, c.path)
		if !errors.Is(err, qlogs.ErrUnreadable) || len(rs) != 1 || rs[0].Error == nil || !strings.Contains(rs[0].Error.Message, c.want) {
			t.Errorf("%s: %v, %+v; want one unreadable line saying %q", c.path, err, rs, c.want)
		}
	}
}
