package blocklist

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/store/storetest"
)

func TestForContact(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	// optOut stores an opt-out request for prefix; status "" leaves the column's default.
	optOut := func(prefix, status string) netip.Prefix {
		t.Helper()
		p := netip.MustParsePrefix(prefix)
		q, args := `INSERT INTO optout_requests (prefix, email) VALUES ($1, 'noc@example.net')`, []any{p}
		if status != "" {
			q, args = `INSERT INTO optout_requests (prefix, email, status) VALUES ($1, 'x@example.net', $2)`, []any{p, status}
		}
		if _, err := s.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
		return p
	}
	opt := optOut("198.19.7.0/28", "")
	pending := optOut("198.19.10.0/24", "pending")
	withdrawn := optOut("198.19.9.0/24", "withdrawn")
	dir := t.TempDir()
	file := netip.MustParsePrefix("198.19.8.128/25")
	if err := os.WriteFile(filepath.Join(dir, "permanent.conf"), []byte(file.String()+" # asked by phone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := ForContact(ctx, s, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr    string
		blocked bool
		src     Source
	}{
		{opt.Addr().Next().String(), true, SourceOptOut},
		{"198.19.7.16", false, ""},                    // just past the opt-out
		{"198.19.8.200", true, SourceFile},            // a file entry inside the lab space
		{withdrawn.Addr().Next().String(), false, ""}, // a withdrawn opt-out no longer excludes
		{pending.Addr().Next().String(), false, ""},   // a pending one does not exclude yet
		{"198.19.0.5", false, ""},                     // lab space re-opened in the reserved list
		{"10.1.2.3", true, SourceReserved},            // private space stays excluded
		{"224.0.0.1", true, SourceReserved},
	} {
		a := netip.MustParseAddr(c.addr)
		why := l.Why(a)
		if (len(why) > 0) != c.blocked || (c.blocked && why[0].Source != c.src) {
			t.Errorf("%s: why %+v, want blocked=%v by %s", a, why, c.blocked, c.src)
		}
	}
	if _, err := ForContact(ctx, s, filepath.Join(dir, "missing")); err == nil {
		t.Error("a named but missing directory was accepted")
	}
	if l, err := ForContact(ctx, nil, ""); err != nil || l.Blocked(opt.Addr()) || !l.Blocked(netip.MustParseAddr("10.0.0.1")) {
		t.Errorf("no store, no dir: %v", err)
	}
}

func TestExcludeForContact(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "permanent.conf"), []byte("198.19.8.0/24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type item struct {
		addr netip.AddrPort
		n    int
	}
	in := []item{
		{netip.MustParseAddrPort("198.19.0.5:853"), 0},
		{netip.MustParseAddrPort("198.19.8.7:853"), 1}, // file entry
		{netip.MustParseAddrPort("10.1.2.3:853"), 2},   // reserved
		{netip.MustParseAddrPort("198.19.9.1:784"), 3},
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	kept, n, err := ExcludeForContact(context.Background(), nil, dir, in, func(it item) netip.Addr { return it.addr.Addr() }, "target", log)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(kept) != 2 || kept[0].n != 0 || kept[1].n != 3 {
		t.Fatalf("kept %v, excluded %d; want items 0 and 3, 2 excluded", kept, n)
	}
	if !strings.Contains(logs.String(), "target excluded: not contacted") || !strings.Contains(logs.String(), "addr=198.19.8.7") {
		t.Errorf("exclusions not logged: %s", logs.String())
	}
	if _, _, err := ExcludeForContact(context.Background(), nil, filepath.Join(dir, "missing"), in, func(it item) netip.Addr { return it.addr.Addr() }, "target", log); err == nil {
		t.Error("a missing blocklist directory was accepted")
	}
}
