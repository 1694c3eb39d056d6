package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// countingListener counts datagrams arriving at addr: the target-side check that a
// blocklisted or refused address received nothing.
func countingListener(t *testing.T, addr string) *atomic.Int64 {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return testsupport.CountDatagrams(t, pc)
}

// TestSendLoopback runs the built-in sender against real servers on loopback: quic-go
// on one port, a miekg/dns server on another, a closed port; 127.0.0.2 is opted out
// and must receive nothing; a hitlist with an address outside the allowlist is refused
// before any packet leaves.
func TestSendLoopback(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"doq"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	qport := uint16(ln.Addr().(*net.UDPAddr).Port)
	dpc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dport := uint16(dpc.LocalAddr().(*net.UDPAddr).Port)
	srv := &dns.Server{PacketConn: dpc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeRefused)
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	defer srv.Shutdown()
	// The opted-out address listens on both ports and must see nothing.
	blockedQ := countingListener(t, net.JoinHostPort("127.0.0.2", itoa(qport)))
	blockedD := countingListener(t, net.JoinHostPort("127.0.0.2", itoa(dport)))
	outside := countingListener(t, net.JoinHostPort("127.0.0.3", itoa(qport)))

	lab := netip.MustParsePrefix("127.0.0.0/30")
	opt := []blocklist.Entry{{Prefix: netip.MustParsePrefix("127.0.0.2/32"), Source: blocklist.SourceOptOut, Note: "test"}}
	safety, err := BuildSafety([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("127.0.0.2/32")}, &lab, false, nil, opt)
	if err != nil {
		t.Fatal(err)
	}
	cfg := SendConfig{Store: s, VantageID: "loopback", Week: "2026-W47", QUICPorts: []uint16{qport}, DNSPorts: []uint16{dport},
		Safety: safety, Rate: 1000, Cooldown: time.Second}

	// Refused: an address outside the allowlist.
	cfg.Hitlist = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.3")}
	if _, err := Send(ctx, cfg); !errors.Is(err, ErrOutsideAllowlist) {
		t.Fatalf("outside the allowlist: %v", err)
	}

	cfg.Hitlist = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}
	sum, err := Send(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ProbesSent != 2 || sum.ByKind[KindQUICVN] != 1 || sum.ByKind[KindDNS] != 1 || sum.Replies != 2 {
		t.Errorf("summary %+v", sum)
	}
	if blockedQ.Load() != 0 || blockedD.Load() != 0 || outside.Load() != 0 {
		t.Errorf("packets at the opted-out/outside addresses: %d %d %d", blockedQ.Load(), blockedD.Load(), outside.Load())
	}
	rows, err := store.SelectTable[store.ScanReply](ctx, s, store.TableScanReplies, "port")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.Address != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("row for %s", r.Address)
		}
		switch uint16(r.Port) {
		case qport:
			if r.ReplyKind != "quic-vn" {
				t.Errorf("quic row %+v", r)
			}
		case dport:
			if r.ReplyKind != "dns" || *r.DNSRcode != dns.RcodeRefused {
				t.Errorf("dns row %+v", r)
			}
		}
	}
	var sender, status string
	if err := s.Pool.QueryRow(ctx, "SELECT sender, status FROM scans WHERE scan_id=$1", sum.ScanID).Scan(&sender, &status); err != nil || sender != "builtin" || status != "ok" {
		t.Errorf("scan row: %s %s %v", sender, status, err)
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// TestSendIPv6 probes quic-go on ::1 (zmap 2.1.1 cannot scan IPv6).
func TestSendIPv6(t *testing.T) {
	enableIPv6Loopback(t)
	ln, err := quic.ListenAddr("[::1]:0", &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"doq"}}, nil)
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer ln.Close()
	qport := uint16(ln.Addr().(*net.UDPAddr).Port)
	lab := netip.MustParsePrefix("::1/128")
	safety, err := BuildSafety(nil, &lab, false, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Send(context.Background(), SendConfig{VantageID: "loopback", QUICPorts: []uint16{qport}, DNSPorts: []uint16{},
		Safety: safety, Rate: 100, Cooldown: time.Second, Hitlist: []netip.Addr{netip.IPv6Loopback()}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ByKind[KindQUICVN] != 1 {
		t.Errorf("summary %+v", sum)
	}
}

// enableIPv6Loopback gives lo its ::1 when the test runs inside a testbed vantage
// namespace (TestMain re-runs the package there), where the testbed disables IPv6 on
// every link; only lo gets it back, for the duration of the test, so nothing can be
// routed anywhere over IPv6.
func enableIPv6Loopback(t *testing.T) {
	t.Helper()
	if os.Getenv(testbed.EnvInVantage) == "" {
		return
	}
	const knob = "/proc/sys/net/ipv6/conf/lo/disable_ipv6"
	old, err := os.ReadFile(knob)
	if err != nil || strings.TrimSpace(string(old)) == "0" {
		return
	}
	if err := os.WriteFile(knob, []byte("0\n"), 0o644); err != nil {
		t.Logf("cannot enable IPv6 on lo: %v", err)
		return
	}
	t.Cleanup(func() { os.WriteFile(knob, old, 0o644) })
}

// TestSendRefusesRatesThatWrap: a rate that is not a number of probes per second in
// MinSendRate..MaxRate (NaN sent as fast as possible and was stored as rate_pps
// -2147483648) is refused before anything is opened or sent.
func TestSendRefusesRatesThatWrap(t *testing.T) {
	for _, r := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 0, 0.5, 3e9, MaxRate + 1} {
		_, err := Send(context.Background(), SendConfig{VantageID: "x", Rate: r})
		if !errors.Is(err, ErrBadRate) {
			t.Errorf("rate %v: %v, want %v", r, err, ErrBadRate)
		}
	}
}
