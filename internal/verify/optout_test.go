package verify

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// udpCounter counts the datagrams a UDP address receives (a QUIC Initial from verify).
func udpCounter(t *testing.T, addr string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	return netip.MustParseAddrPort(pc.LocalAddr().String()), testsupport.CountDatagrams(t, pc)
}

// TestRunNeverContactsOptedOut: a target inside an accepted opt-out (or a blocklist
// file) gets no packet and no result row; the others are verified.
func TestRunNeverContactsOptedOut(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	open, openN := udpCounter(t, "127.0.0.1:0")
	opted, optedN := udpCounter(t, "127.0.71.1:0")
	filed, filedN := udpCounter(t, "127.0.72.1:0")
	if _, err := s.Pool.Exec(ctx, `INSERT INTO optout_requests (prefix, email) VALUES ('127.0.71.0/24', 'noc@example.net')`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "permanent.conf"), []byte("127.0.72.1/32 # by letter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	targets := filepath.Join(dir, "targets.txt")
	if err := os.WriteFile(targets, []byte(fmt.Sprintf("%s\n%s\n%s\n", open, opted, filed)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Verify: Config{HandshakeTimeout: 200 * time.Millisecond, TargetTimeout: time.Second},
		Vantage: "v", Week: "2026-W47", TargetsFile: targets, BlocklistDir: dir, Concurrency: 2, RetryTimeouts: false}
	sum, err := Run(ctx, s, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Excluded != 2 || sum.Targets != 1 {
		t.Errorf("summary: %d excluded, %d targets; want 2, 1", sum.Excluded, sum.Targets)
	}
	if openN.Load() == 0 {
		t.Error("the open target got no packet: the test proves nothing")
	}
	if n := optedN.Load() + filedN.Load(); n != 0 {
		t.Errorf("excluded targets received %d datagrams", n)
	}
	if got := count(t, s, `SELECT count(*) FROM verification_results WHERE address <> $1`, open.Addr()); got != 0 {
		t.Errorf("%d result rows for excluded targets", got)
	}
}
