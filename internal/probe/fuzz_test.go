package probe

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/quicver"
)

func fuzzSeeds(f *testing.F) [][]byte {
	p := DefaultQUICProbe()
	seeds := [][]byte{
		nil, {0x80}, {0x80, 0, 0, 0, 0, 0xff}, {0xc0, 0, 0, 0, 1, 20},
		vnPacket(0x80, p.SCID, p.DCID, quicver.V1, quicver.V2, 0x0a0a0a0a),
		vnPacket(0x80, p.DCID, p.SCID),
		dnsReply(f, nil),
		{0x44, 0x51, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 0xc0, 0x0c},
	}
	files, _ := filepath.Glob("testdata/vn/*.bin")
	peers, _ := filepath.Glob("testdata/peervn/*.bin") // the testbed's peers (quinn, aioquic, ...)
	for _, fn := range append(files, peers...) {
		if b, err := os.ReadFile(fn); err == nil {
			seeds = append(seeds, b)
		}
	}
	return seeds
}

func FuzzParseVN(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	p := DefaultQUICProbe()
	f.Fuzz(func(t *testing.T, b []byte) {
		vn, err := ParseVN(b)
		if err != nil {
			return
		}
		// A parsed VN re-encodes to exactly its input.
		again := vnPacket(b[0], vn.DCID, vn.SCID, vn.Versions...)
		if string(again) != string(b) {
			t.Fatalf("re-encoded %x != %x", again, b)
		}
		_ = vn.EchoesProbe(p)
	})
}

func FuzzClassify(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, uint16(853), -1)
		f.Add(s, uint16(53), -1)
	}
	f.Add([]byte(nil), uint16(784), 3)
	c := testClassifier(f)
	f.Fuzz(func(t *testing.T, b []byte, port uint16, icmp int) {
		r := Reply{Addr: netip.MustParseAddr("198.19.1.2"), Port: port, Sport: int(port), Payload: b, ICMPType: icmp}
		res := c.Classify(r)
		ok := false
		for _, k := range Kinds {
			ok = ok || res.Kind == k
		}
		if !ok {
			t.Fatalf("unknown kind %q", res.Kind)
		}
		if res.Kind == KindQUICVN && (res.CIDMatch == nil || !*res.CIDMatch) {
			t.Fatal("quic-vn without a CID match")
		}
		row := Row(1, r, res)
		if len(row.Payload) > MaxStoredPayload {
			t.Fatal("payload not capped")
		}
	})
}

// FuzzIngestCSV: any bytes as a raw zmap file (a replay of a damaged or cut file) give
// counts, never a panic: every data line is a reply or a bad line, and a last line
// without a newline is reported cut and not parsed.
func FuzzIngestCSV(f *testing.F) {
	for _, fn := range []string{"testdata/zmap/quic-784.csv", "testdata/zmap/dns-53.csv", "testdata/zmap/icmp-9999.csv"} {
		if b, err := os.ReadFile(fn); err == nil {
			f.Add(b)
			f.Add(b[:len(b)/2])
		}
	}
	f.Add([]byte{})
	f.Add([]byte("saddr\n\n,,,\n"))
	c := testClassifier(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := NewIngest(nil, 0, c, nil)
		if err := IngestCSV(context.Background(), bytes.NewReader(data), 853, in); err != nil {
			t.Fatal(err)
		}
		if in.Replies+in.Bad < in.Lines || in.Replies > in.Lines {
			t.Fatalf("lines %d, replies %d, bad %d", in.Lines, in.Replies, in.Bad)
		}
		if cut := len(data) > 0 && data[len(data)-1] != '\n'; cut != in.Truncated {
			t.Fatalf("truncated %v for a file ending in %q", in.Truncated, data[max(0, len(data)-5):])
		}
	})
}
