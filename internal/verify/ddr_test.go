package verify

import (
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// startDNS serves handler on UDP and TCP port 53 of addr (loopback; needs root for the
// port).
func startDNS(t *testing.T, addr string, handler dns.HandlerFunc) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("binding port 53 needs root")
	}
	for _, network := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: net.JoinHostPort(addr, "53"), Net: network, Handler: handler}
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ListenAndServe()
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatalf("DNS server on %s/%s did not start", addr, network)
		}
		t.Cleanup(func() { srv.Shutdown() })
	}
}

func svcb(prio uint16, target string, params ...dns.SVCBKeyValue) dns.RR {
	return &dns.SVCB{Hdr: dns.RR_Header{Name: DDRName, Rrtype: dns.TypeSVCB, Class: dns.ClassINET, Ttl: 60},
		Priority: prio, Target: target, Value: params}
}

func TestQueryDDR(t *testing.T) {
	designations := []dns.RR{
		svcb(1, "dns.example.", &dns.SVCBAlpn{Alpn: []string{"doq"}}, &dns.SVCBPort{Port: 10853},
			&dns.SVCBIPv4Hint{Hint: []net.IP{net.IPv4(127, 0, 88, 9)}}),
		svcb(2, "dns.example.", &dns.SVCBAlpn{Alpn: []string{"h2", "h3"}}, &dns.SVCBDoHPath{Template: "/dns-query{?dns}"},
			&dns.SVCBIPv4Hint{Hint: []net.IP{net.IPv4(127, 0, 88, 9)}}),
		svcb(0, "alias.example."), // AliasMode: not a designation
	}
	many := make([]dns.RR, 0, 40)
	for i := range 40 { // more than a UDP answer holds without EDNS: truncated, then TCP
		many = append(many, svcb(uint16(i+1), "dns.example.", &dns.SVCBAlpn{Alpn: []string{"dot"}},
			&dns.SVCBIPv4Hint{Hint: []net.IP{net.IPv4(127, 0, 88, 9), net.IPv4(127, 0, 88, 10), net.IPv4(127, 0, 88, 11)}}))
	}
	cases := []struct {
		addr   string
		answer func(w dns.ResponseWriter, r *dns.Msg)
		status string
		n      int
	}{
		{"127.0.88.1", func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg).SetReply(r)
			m.Answer = designations
			w.WriteMsg(m)
		}, DDRDesignations, 2},
		{"127.0.88.2", func(w dns.ResponseWriter, r *dns.Msg) { w.WriteMsg(new(dns.Msg).SetReply(r)) }, DDRNone, 0},
		{"127.0.88.3", func(w dns.ResponseWriter, r *dns.Msg) { w.WriteMsg(new(dns.Msg).SetRcode(r, dns.RcodeNameError)) }, DDRNXDomain, 0},
		{"127.0.88.4", func(w dns.ResponseWriter, r *dns.Msg) { w.WriteMsg(new(dns.Msg).SetRcode(r, dns.RcodeRefused)) }, DDRRefused, 0},
		{"127.0.88.5", func(w dns.ResponseWriter, r *dns.Msg) { w.WriteMsg(new(dns.Msg).SetRcode(r, dns.RcodeServerFailure)) }, DDRDNSError, 0},
		{"127.0.88.6", func(w dns.ResponseWriter, r *dns.Msg) {}, DDRTimeout, 0},
		{"127.0.88.7", func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg).SetReply(r)
			m.Question[0].Name = "other.example."
			w.WriteMsg(m)
		}, DDRBadResponse, 0},
		{"127.0.88.8", func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg).SetReply(r)
			m.Answer = many
			r.IsEdns0().SetUDPSize(512)
			m.Truncate(dnsSize(w, r))
			w.WriteMsg(m)
		}, DDRDesignations, 40},
	}
	for _, c := range cases {
		startDNS(t, c.addr, c.answer)
	}
	for _, c := range cases {
		a := QueryDDR(context.Background(), netip.MustParseAddr(c.addr), 500*time.Millisecond)
		if a.Status != c.status || len(a.Designations) != c.n {
			t.Errorf("%s: status %s (%s), %d designations; want %s, %d", c.addr, a.Status, a.Detail, len(a.Designations), c.status, c.n)
		}
	}
	a := QueryDDR(context.Background(), netip.MustParseAddr("127.0.88.1"), time.Second)
	if len(a.Designations) != 2 {
		t.Fatalf("designations %+v", a.Designations)
	}
	d := a.Designations[0]
	want := []netip.AddrPort{netip.MustParseAddrPort("127.0.88.9:10853")}
	if !slices.Equal(d.DoQEndpoints(), want) || d.Target != "dns.example." || d.Priority != 1 {
		t.Errorf("DoQ designation %+v: endpoints %v, want %v", d, d.DoQEndpoints(), want)
	}
	if doh := a.Designations[1]; doh.DoHPath != "/dns-query{?dns}" || len(doh.DoQEndpoints()) != 0 || !slices.Equal(doh.ALPNs, []string{"h2", "h3"}) {
		t.Errorf("DoH designation %+v", doh)
	}
	noPort := Designation{ALPNs: []string{"doq"}, IPv4Hints: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	if got := noPort.DoQEndpoints(); len(got) != 1 || got[0].Port() != DDRPortDoQ {
		t.Errorf("designation without a port: %v", got)
	}
}

// dnsSize is the UDP size a truncated answer must fit: 512 over UDP, 65535 over TCP.
func dnsSize(w dns.ResponseWriter, _ *dns.Msg) int {
	if w.LocalAddr().Network() == "tcp" {
		return dns.MaxMsgSize
	}
	return dns.MinMsgSize
}
