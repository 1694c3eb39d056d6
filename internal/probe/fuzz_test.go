package probe

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// FuzzIngestCSVPorts: a several-port run's output (zmap 4.x) gives replies of the
// run's ports only, bad lines, or replies without a port; never a panic.
func FuzzIngestCSVPorts(f *testing.F) {
	for _, fn := range []string{"testdata/zmap4/784_853_8853.csv", "testdata/zmap4/53.csv", "testdata/zmap/icmp-9999.csv"} {
		if b, err := os.ReadFile(fn); err == nil {
			f.Add(b)
			f.Add(b[:len(b)/3])
		}
	}
	f.Add([]byte("saddr,sport,classification\n198.19.0.1,853,udp\n198.19.0.1,,icmp\n198.19.0.1,9,udp\n"))
	c := testClassifier(f)
	ports := []uint16{784, 853, 8853}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := NewIngest(nil, 0, c, nil)
		in.Ports = ports
		if err := IngestCSV(context.Background(), bytes.NewReader(data), ports[0], in); err != nil {
			t.Fatal(err)
		}
		// A bad header is a bad line that is not a data line.
		if in.Replies+in.Bad+in.NoPort < in.Lines || in.Replies+in.NoPort > in.Lines {
			t.Fatalf("lines %d, replies %d, bad %d, without port %d", in.Lines, in.Replies, in.Bad, in.NoPort)
		}
		for p := range in.Counts {
			if p != 784 && p != 853 && p != 8853 {
				t.Fatalf("reply stored under port %d, not one of the run's", p)
			}
		}
	})
}

// FuzzParseZmapVersion: any `zmap --version` output gives a dialect or ErrZmapVersion.
func FuzzParseZmapVersion(f *testing.F) {
	for _, s := range []string{"zmap 2.1.1\n", "zmap v4.3.4\n", "zmap v3.0.0", "zmap Development Build. Commit x", "zmap 99999999999999999999.1.1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseZmapVersion(b)
		if (err == nil) != (v.Dialect != nil && v.Dialect == zmapDialects[v.Major]) {
			t.Fatalf("%q: %+v %v", b, v, err)
		}
		if err != nil && !errors.Is(err, ErrZmapVersion) {
			t.Fatalf("%q: error %v is not ErrZmapVersion", b, err)
		}
	})
}

// FuzzParseRawName: a raw file name gives ports 1..65535 and an attempt >= 1, or an error;
// the names zprobe writes read back.
func FuzzParseRawName(f *testing.F) {
	for _, s := range []string{"853.csv", "784_853_8853.csv", "53.attempt2.csv", "0.csv", "70000.csv", "a.csv", "853.attempt1.csv", "1_.csv"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		ports, attempt, err := ParseRawName(name)
		if err != nil {
			return
		}
		if len(ports) == 0 || attempt < 1 {
			t.Fatalf("%q: ports %v attempt %d", name, ports, attempt)
		}
		for _, p := range ports {
			if p == 0 {
				t.Fatalf("%q: port 0", name)
			}
		}
		again := rawBase(ports) + ".csv"
		if attempt > 1 {
			again = rawBase(ports) + ".attempt" + strconv.Itoa(attempt) + ".csv"
		}
		if p2, a2, err := ParseRawName(again); err != nil || a2 != attempt || !slices.Equal(p2, ports) {
			t.Fatalf("%q -> %q: %v %d %v", name, again, p2, a2, err)
		}
	})
}
