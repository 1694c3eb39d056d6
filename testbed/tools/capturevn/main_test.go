package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCapturedFiles parses every committed capture: each is a VN packet echoing the
// probe's connection IDs and listing QUIC v1.
func TestCapturedFiles(t *testing.T) {
	files, err := filepath.Glob("../../../internal/probe/testdata/peervn/*.bin")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in internal/probe/testdata/peervn (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := describe(b)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, want := range []string{"echoes the probe's SCID: true", "echoes the probe's DCID: true", "0x00000001(v1)"} {
			if !strings.Contains(desc, want) {
				t.Errorf("%s: %q missing from\n%s", f, want, desc)
			}
		}
	}
}

func TestProbeShape(t *testing.T) {
	p := initial()
	if len(p) != datagramSize || p[0]&(longHeaderForm|fixedBit) != longHeaderForm|fixedBit {
		t.Fatalf("probe: %d bytes, first byte %#x", len(p), p[0])
	}
	if d := int(p[5]); d < 8 || d > 20 {
		t.Fatalf("DCID length %d outside 8..20", d)
	}
}

// FuzzDescribe: any datagram gets a description or an error, never a panic.
func FuzzDescribe(f *testing.F) {
	files, _ := filepath.Glob("../../../internal/probe/testdata/peervn/*.bin")
	for _, fn := range files {
		if b, err := os.ReadFile(fn); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte{0x80, 0, 0, 0, 0, 20})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = describe(b)
	})
}
