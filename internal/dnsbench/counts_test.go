package dnsbench

import (
	"fmt"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/measure"
)

// The report counts every outcome by status and every answer by rcode: header rcodes,
// extended ones (named or not), and asking for the report twice counts nothing twice.
func TestReportCounts(t *testing.T) {
	tg := Target{Protocol: measure.DoUDP, Addr: netip.MustParseAddrPort("127.0.0.1:53")}
	b := newBench(Config{Targets: []Target{tg}, Workers: 1, Timeout: time.Second}, tg)
	b.start = time.Now()
	rcodes := map[int]int{dns.RcodeSuccess: 3, dns.RcodeNameError: 2, dns.RcodeBadSig: 1, 4000: 1}
	for rc, n := range rcodes {
		for range n {
			b.record(b.start, b.start.Add(time.Second), measure.Query{Status: measure.StatusOK, Rcode: rc,
				StartedAt: b.start, Resolve: time.Millisecond})
		}
	}
	for range 2 {
		b.record(b.start, b.start.Add(time.Second), measure.Query{Status: measure.StatusTimeout, Err: fmt.Errorf("no answer")})
	}
	want := map[string]int64{"NOERROR": 3, "NXDOMAIN": 2, dns.RcodeToString[dns.RcodeBadSig]: 1, "RCODE4000": 1}
	for i := range 2 {
		r := b.report()
		if !maps.Equal(r.Rcodes, want) {
			t.Errorf("report %d: rcodes %v, want %v", i+1, r.Rcodes, want)
		}
		if st := map[measure.Status]int64{measure.StatusOK: 7, measure.StatusTimeout: 2}; !maps.Equal(r.Statuses, st) {
			t.Errorf("report %d: statuses %v, want %v", i+1, r.Statuses, st)
		}
		if r.Answered != 7 || r.Sent != 0 {
			t.Errorf("report %d: answered %d sent %d, want 7 and 0 (record counts outcomes, gate sends)", i+1, r.Answered, r.Sent)
		}
	}
}
