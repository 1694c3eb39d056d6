package simquic

import (
	"encoding/binary"
	"testing"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// FuzzRawReply: any datagram to a raw responder yields nil, garbage, or a VN whose
// connection IDs echo the packet's (never a panic).
func FuzzRawReply(f *testing.F) {
	pkt, _, _ := vnProbe()
	f.Add(pkt)
	f.Add([]byte{0xc0, 0, 0, 0, 1, 21})
	f.Add([]byte{})
	recs := []*population.Record{
		{Hostile: hostile.BadVN, Versions: []string{"v1"}},
		{Hostile: hostile.DraftOnly, Versions: []string{"draft-29", "draft-34"}},
		{Hostile: hostile.Garbage},
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, r := range recs {
			out := rawReply(r, b)
			if out == nil || r.Hostile == hostile.Garbage {
				continue
			}
			_, dcid, scid, ok := longHeaderIDs(b)
			if !ok || len(out) < 7 || binary.BigEndian.Uint32(out[1:5]) != 0 {
				t.Fatalf("%s: VN %x for %x", r.Hostile, out, b)
			}
			if int(out[5]) != len(scid) || int(out[6+len(scid)]) != len(dcid) {
				t.Fatalf("%s: VN connection IDs do not echo the packet's", r.Hostile)
			}
		}
	})
}

// FuzzAnswer: any query bytes give an error or a response that parses, echoes the ID and
// carries the rcode asked for.
func FuzzAnswer(f *testing.F) {
	pop, err := population.LoadDefault()
	if err != nil {
		f.Fatal(err)
	}
	q := new(dns.Msg)
	q.SetQuestion("test.com.", dns.TypeA)
	b, _ := q.Pack()
	f.Add(b)
	f.Add([]byte{0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		for rcode, want := range map[string]int{"NOERROR": dns.RcodeSuccess, "REFUSED": dns.RcodeRefused, "SERVFAIL": dns.RcodeServerFailure} {
			out, err := answer(pop, b, rcode)
			if err != nil {
				continue
			}
			m := new(dns.Msg)
			if err := m.Unpack(out); err != nil {
				t.Fatalf("response does not parse: %v", err)
			}
			if m.Rcode != want || m.Id != binary.BigEndian.Uint16(b) || !m.Response {
				t.Fatalf("rcode %d id %d, want %d id %d", m.Rcode, m.Id, want, binary.BigEndian.Uint16(b))
			}
		}
	})
}

// TestGreaseVersionNeverTheClients: the grease version a VN lists is reserved
// (0x?a?a?a?a) and never the version the client sent, here the scanner's grease probe
// version, which a random reserved version would equal once in 65,536 draws (about 16
// times in the draws below).
func TestGreaseVersionNeverTheClients(t *testing.T) {
	const client = quicver.ProbeGrease
	for range 1 << 20 {
		v := greaseVersion(client)
		if v == client || v&0x0f0f0f0f != 0x0a0a0a0a {
			t.Fatalf("grease version %#08x for a client of %#08x", v, client)
		}
	}
}
