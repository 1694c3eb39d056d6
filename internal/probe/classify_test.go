package probe

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/quicver"
)

func TestProbesCommitted(t *testing.T) {
	files, err := StandardProbes()
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, ProbeFile{Name: "README.md", Data: ProbesReadme(files)})
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join("..", "..", "probes", f.Name))
		if err != nil {
			t.Errorf("probes/%s: %v (run go run ./internal/probe/gen)", f.Name, err)
			continue
		}
		if !bytes.Equal(got, f.Data) {
			t.Errorf("probes/%s differs from the generator's output (run go run ./internal/probe/gen)", f.Name)
		}
	}
}

func TestQUICProbeShape(t *testing.T) {
	for _, v := range []uint32{quicver.ProbeGrease, quicver.ProbeAllOnes, 0} {
		p := DefaultQUICProbe()
		p.Version = v
		b, err := p.Build()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != p.Size || len(b) < MinInitialDatagram {
			t.Errorf("size %d", len(b))
		}
		if b[0]&0xc0 != 0xc0 || b[0]&0x30 != 0 {
			t.Errorf("first byte %#x is not a long-header Initial", b[0])
		}
		if got := binary.BigEndian.Uint32(b[1:]); got != v {
			t.Errorf("version %#x", got)
		}
		dl := int(b[5])
		if !bytes.Equal(b[6:6+dl], p.DCID) || !bytes.Equal(b[7+dl:7+dl+int(b[6+dl])], p.SCID) {
			t.Errorf("CIDs wrong")
		}
		// Length field covers exactly the rest of the datagram.
		i := 7 + dl + int(b[6+dl]) + 1
		l := int(binary.BigEndian.Uint16(b[i:]) & 0x3fff)
		if i+2+l != len(b) {
			t.Errorf("length field %d, rest %d", l, len(b)-i-2)
		}
	}
	bad := []QUICProbe{
		{Version: 0x1a2a3a4a, DCID: make([]byte, 7), Size: 1200},
		{Version: 0x1a2a3a4a, DCID: make([]byte, 21), Size: 1200},
		{Version: 0x1a2a3a4a, DCID: make([]byte, 8), SCID: make([]byte, 21), Size: 1200},
		{Version: 0x1a2a3a4a, DCID: make([]byte, 8), Size: 1199},
		{Version: 0x1a2a3a4a, DCID: make([]byte, 8), Size: 1473},
		{Version: quicver.V1, DCID: make([]byte, 8), Size: 1200},
	}
	for _, p := range bad {
		if _, err := p.Build(); err == nil {
			t.Errorf("Build(%+v): no error", p)
		}
	}
}

// vnPacket builds a VN packet (RFC 9000 §17.2.1).
func vnPacket(first byte, dcid, scid []byte, versions ...uint32) []byte {
	b := []byte{first, 0, 0, 0, 0, byte(len(dcid))}
	b = append(b, dcid...)
	b = append(b, byte(len(scid)))
	b = append(b, scid...)
	for _, v := range versions {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

func testClassifier(t testing.TB) *Classifier {
	c, err := NewClassifier(DefaultQUICProbe(), DefaultDNSProbe(), map[uint16]ProbeKind{53: ProbeDNS})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClassifyQUIC(t *testing.T) {
	c := testClassifier(t)
	p := DefaultQUICProbe()
	addr := netip.MustParseAddr("198.19.0.7")
	for _, tc := range []struct {
		name    string
		payload []byte
		want    Kind
		grease  int
	}{
		{"valid", vnPacket(0x80, p.SCID, p.DCID, quicver.V1, 0x3a4a5a6a, quicver.V2), KindQUICVN, 1},
		{"valid any first-byte bits", vnPacket(0xff, p.SCID, p.DCID, quicver.Draft29), KindQUICVN, 0},
		{"cids swapped", vnPacket(0x80, p.DCID, p.SCID, quicver.V1), KindQUICVNInvalid, 0},
		{"cids empty", vnPacket(0x80, nil, nil, quicver.V1), KindQUICVNInvalid, 0},
		{"lists probe version", vnPacket(0x80, p.SCID, p.DCID, quicver.V1, quicver.ProbeGrease), KindQUICVNInvalid, 1},
		{"no versions", vnPacket(0x80, p.SCID, p.DCID), KindQUICVNInvalid, 0},
		{"misaligned", append(vnPacket(0x80, p.SCID, p.DCID, quicver.V1), 1), KindQUICVNInvalid, 0},
		{"truncated dcid", vnPacket(0x80, p.SCID, p.DCID)[:10], KindQUICVNInvalid, 0},
		{"truncated header", []byte{0x80, 0, 0, 0, 0}, KindQUICVNInvalid, 0},
		{"initial v1", append([]byte{0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0}, make([]byte, 40)...), KindQUICOther, 0},
		{"short header (stateless reset?)", append([]byte{0x41}, make([]byte, 30)...), KindQUICOther, 0},
		{"echo text", []byte("hello"), KindNotQUIC, 0},
		{"empty", nil, KindNotQUIC, 0},
		{"dns on a quic port", []byte{0x44, 0x51, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}, KindNotQUIC, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := c.Classify(Reply{Addr: addr, Port: 853, Sport: 853, Payload: tc.payload, ICMPType: -1})
			if res.Kind != tc.want {
				t.Fatalf("kind %s (%s), want %s", res.Kind, res.Reason, tc.want)
			}
			if res.Grease != tc.grease {
				t.Errorf("grease %d, want %d", res.Grease, tc.grease)
			}
			row := Row(1, Reply{Addr: addr, Port: 853, Sport: 853, Payload: tc.payload, ICMPType: -1}, res)
			if row.ReplyKind != string(tc.want) || row.Address != addr {
				t.Errorf("row %+v", row)
			}
		})
	}
}

func TestClassifyICMP(t *testing.T) {
	c := testClassifier(t)
	for _, tc := range []struct {
		addr string
		typ  int
		port uint16
		want Kind
	}{
		{"198.19.0.1", 3, 784, KindICMPUnreach},
		{"198.19.0.1", 3, 53, KindICMPUnreach},
		{"198.19.0.1", 11, 784, KindNotQUIC},
		{"2001:db8::1", 1, 784, KindICMPUnreach},
	} {
		r := Reply{Addr: netip.MustParseAddr(tc.addr), Port: tc.port, Sport: -1, ICMPType: tc.typ, ICMPCode: 3}
		res := c.Classify(r)
		if res.Kind != tc.want {
			t.Errorf("%+v: %s, want %s", tc, res.Kind, tc.want)
		}
		row := Row(1, r, res)
		if row.ICMPType == nil || int(*row.ICMPType) != tc.typ || row.Sport != nil || row.Payload != nil {
			t.Errorf("row %+v", row)
		}
	}
}

// TestRealVN classifies the VN packets captured from real stacks (testdata/vn; the
// testbed branch adds CoreDNS, quinn, aioquic captures there).
func TestRealVN(t *testing.T) {
	files, _ := filepath.Glob("testdata/vn/*.bin")
	if len(files) == 0 {
		t.Fatal("no captures in testdata/vn")
	}
	c := testClassifier(t)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		res := c.Classify(Reply{Addr: netip.MustParseAddr("127.0.0.1"), Port: 784, Sport: 784, Payload: b, ICMPType: -1})
		if res.Kind != KindQUICVN || res.Grease < 1 || len(res.Versions) < 2 {
			t.Errorf("%s: %s (%s), versions %v", f, res.Kind, res.Reason, quicver.Names(res.Versions))
		}
		hasV1 := false
		for _, v := range res.Versions {
			hasV1 = hasV1 || v == quicver.V1
		}
		if !hasV1 {
			t.Errorf("%s: no v1 in %v", f, quicver.Names(res.Versions))
		}
		// Any change to the CIDs makes it invalid.
		bad := bytes.Clone(b)
		bad[6] ^= 1
		if k := c.Classify(Reply{Addr: netip.MustParseAddr("127.0.0.1"), Port: 784, Payload: bad, ICMPType: -1}).Kind; k != KindQUICVNInvalid {
			t.Errorf("%s with a flipped DCID bit: %s", f, k)
		}
		t.Logf("%s: %v", filepath.Base(f), quicver.Names(res.Versions))
	}
}

func dnsReply(t testing.TB, edit func(m *dns.Msg)) []byte {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(dnsmsg.DefaultQueryName), dns.TypeA)
	q.Id = DefaultDNSID
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	rr, _ := dns.NewRR(dns.Fqdn(dnsmsg.DefaultQueryName) + " 300 IN A 198.19.0.1")
	m.Answer = append(m.Answer, rr)
	if edit != nil {
		edit(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDNSProbe(t *testing.T) {
	b, err := DefaultDNSProbe().Build()
	if err != nil {
		t.Fatal(err)
	}
	var m dns.Msg
	if err := m.Unpack(b); err != nil {
		t.Fatal(err)
	}
	if m.Id != DefaultDNSID || !m.RecursionDesired || m.Response || len(m.Question) != 1 ||
		m.Question[0].Name != dns.Fqdn(dnsmsg.DefaultQueryName) || m.Question[0].Qtype != dns.TypeA || m.Question[0].Qclass != dns.ClassINET {
		t.Errorf("query %v", m)
	}
	for _, n := range []string{"", "a..b", strings.Repeat("a", 64) + ".com", strings.Repeat("abcdefgh.", 32)} {
		if _, err := (DNSProbe{QName: n}).Build(); err == nil && n != "" {
			t.Errorf("name %q accepted", n)
		}
	}
}

func TestClassifyDNS(t *testing.T) {
	c := testClassifier(t)
	for _, tc := range []struct {
		name    string
		payload []byte
		want    Kind
		rcode   int
		answers int
		ra      bool
	}{
		{"answer", dnsReply(t, nil), KindDNS, 0, 1, true},
		{"nxdomain no ra", dnsReply(t, func(m *dns.Msg) { m.Rcode = dns.RcodeNameError; m.Answer = nil; m.RecursionAvailable = false }), KindDNS, 3, 0, false},
		{"refused", dnsReply(t, func(m *dns.Msg) { m.Rcode = dns.RcodeRefused; m.Answer = nil }), KindDNS, 5, 0, true},
		{"0x20 case", dnsReply(t, func(m *dns.Msg) { m.Question[0].Name = "TeSt.CoM." }), KindDNS, 0, 1, true},
		{"compressed + edns", dnsReply(t, func(m *dns.Msg) { m.Compress = true; m.SetEdns0(1232, false) }), KindDNS, 0, 1, true},
		{"wrong id", dnsReply(t, func(m *dns.Msg) { m.Id = 1 }), KindDNSMalformed, 0, 1, true},
		{"other question", dnsReply(t, func(m *dns.Msg) { m.Question[0].Name = "example.org." }), KindDNSMalformed, 0, 1, true},
		{"query echoed", func() []byte { b, _ := DefaultDNSProbe().Build(); return b }(), KindDNSMalformed, 0, 0, false},
		{"truncated", dnsReply(t, nil)[:40], KindDNSMalformed, 0, 0, false},
		{"trailing", append(dnsReply(t, nil), 0), KindDNSMalformed, 0, 0, false},
		{"quic vn on 53", vnPacket(0x80, DefaultSCID, DefaultDCID, 1), KindDNSMalformed, 0, 0, false},
		{"empty", nil, KindDNSMalformed, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Reply{Addr: netip.MustParseAddr("198.19.0.53"), Port: 53, Sport: 53, Payload: tc.payload, ICMPType: -1}
			res := c.Classify(r)
			if res.Kind != tc.want {
				t.Fatalf("kind %s (%s), want %s", res.Kind, res.Reason, tc.want)
			}
			if tc.want != KindDNS {
				return
			}
			if res.DNS.Rcode != tc.rcode || res.DNS.Answers != tc.answers || res.DNS.RA != tc.ra {
				t.Errorf("dns %+v", res.DNS)
			}
			row := Row(7, r, res)
			if *row.DNSRcode != int16(tc.rcode) || *row.DNSAnswers != int16(tc.answers) || *row.DNSRA != tc.ra {
				t.Errorf("row %+v", row)
			}
		})
	}
}

// TestTestbedPeerVN classifies the VN packets testbed/tools/capturevn captured from the
// third-party stacks in the testbed (testdata/peervn: quic-go in CoreDNS, quinn in
// hickory-dns, aioquic, ngtcp2), with a classifier for the probe they were captured
// with, and checks every version the capture's description lists.
func TestTestbedPeerVN(t *testing.T) {
	files, _ := filepath.Glob("testdata/peervn/*.bin")
	if len(files) == 0 {
		t.Fatal("no captures in testdata/peervn")
	}
	probe := QUICProbe{Version: 0x1a2a3a4a, DCID: []byte("doqscan-vnprobe!"), SCID: []byte("capturvn"), Size: MinInitialDatagram}
	c, err := NewClassifier(probe, DefaultDNSProbe(), nil)
	if err != nil {
		t.Fatal(err)
	}
	verRe := regexp.MustCompile(`0x([0-9a-f]{8})\(([^)]*)\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := os.ReadFile(strings.TrimSuffix(f, ".bin") + ".txt")
		if err != nil {
			t.Fatal(err)
		}
		var want []uint32
		for _, l := range strings.Split(string(desc), "\n") {
			if !strings.HasPrefix(l, "supported versions:") {
				continue
			}
			for _, m := range verRe.FindAllStringSubmatch(l, -1) {
				v, _ := strconv.ParseUint(m[1], 16, 32)
				want = append(want, uint32(v))
			}
		}
		if len(want) == 0 {
			t.Fatalf("%s: no 'supported versions:' line", f)
		}
		res := c.Classify(Reply{Addr: netip.MustParseAddr("198.19.3.1"), Port: 853, Sport: 853, Payload: b, ICMPType: -1})
		if res.Kind != KindQUICVN {
			t.Errorf("%s: %s (%s)", f, res.Kind, res.Reason)
			continue
		}
		if !slices.Equal(res.Versions, want) {
			t.Errorf("%s: versions %v, the capture lists %v", f, quicver.Names(res.Versions), quicver.Names(want))
		}
		grease := 0
		for _, v := range want {
			if quicver.IsGrease(v) {
				grease++
			}
		}
		if res.Grease != grease {
			t.Errorf("%s: %d greased versions, want %d", f, res.Grease, grease)
		}
		// The same reply checked against our default probe's CIDs is not ours.
		if k := testClassifier(t).Classify(Reply{Addr: netip.MustParseAddr("198.19.3.1"), Port: 853, Payload: b, ICMPType: -1}).Kind; k != KindQUICVNInvalid {
			t.Errorf("%s against other CIDs: %s", f, k)
		}
		t.Logf("%s: %v", filepath.Base(f), quicver.Names(res.Versions))
	}
}
