package blocklist

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
)

func TestReservedPresent(t *testing.T) {
	res := Reserved()
	if len(res) < 16 {
		t.Fatalf("only %d reserved entries", len(res))
	}
	l, err := Build(res, nil)
	if err != nil {
		t.Fatal(err)
	}
	// zmap's own default blocklist (Debian /etc/zmap/blacklist.conf) must be covered.
	if b, err := os.ReadFile("/etc/zmap/blacklist.conf"); err == nil {
		def, err := Parse(bytes.NewReader(b), SourceFile, "zmap default")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range def {
			for _, a := range []netip.Addr{e.Prefix.Addr(), lastAddr(e.Prefix)} {
				if !l.Blocked(a) {
					t.Errorf("zmap's default %s (%s) not blocked at %s", e.Prefix, e.Note, a)
				}
			}
		}
	}
	for _, s := range []string{"10.1.2.3", "224.0.0.1", "255.255.255.255", "198.19.0.1", "127.0.0.1", "::1", "fe80::1", "2001:db8::1", "::ffff:10.0.0.1"} {
		if !l.Blocked(netip.MustParseAddr(s)) {
			t.Errorf("%s not blocked", s)
		}
	}
	for _, s := range []string{"1.1.1.1", "8.8.8.8", "2606:4700::1111"} {
		if l.Blocked(netip.MustParseAddr(s)) {
			t.Errorf("%s blocked: %v", s, l.Why(netip.MustParseAddr(s)))
		}
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestDirAndOptOuts(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.conf"), []byte("# header\n93.184.216.0/24 # example\n198.19.7.7\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "reserved.conf"), []byte("garbage that would fail\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not read\n"), 0o644)
	files, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("entries %v", files)
	}
	opt := []Entry{{Prefix: netip.MustParsePrefix("198.19.9.0/24"), Source: SourceOptOut, Origin: "optout_requests", Note: "noc@example.net"}}
	l, err := Build(append(append(Reserved(), files...), opt...), []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]Source{
		"93.184.216.34": SourceFile, "198.19.7.7": SourceFile, "198.19.9.200": SourceOptOut, "198.18.0.2": SourceReserved,
	} {
		why := l.Why(netip.MustParseAddr(addr))
		if len(why) == 0 || why[0].Source != want {
			t.Errorf("%s: why %v, want %s", addr, why, want)
		}
	}
	if l.Blocked(netip.MustParseAddr("198.19.7.8")) {
		t.Error("carved-out testbed address blocked")
	}
	if _, err := Dir(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing directory accepted")
	}
	os.WriteFile(filepath.Join(dir, "bad.conf"), []byte("300.1.1.1/8\n"), 0o644)
	if _, err := Dir(dir); err == nil || !strings.Contains(err.Error(), "bad.conf:1") {
		t.Errorf("bad line: %v", err)
	}
}

func TestCarveOutNeverBeyondLab(t *testing.T) {
	for _, c := range []string{"0.0.0.0/0", "10.0.0.0/8", "198.16.0.0/13", "198.18.0.0/14", "8.8.8.0/24", "::/0", "fe80::/10", "::ffff:198.18.0.0/111"} {
		if _, err := Build(Reserved(), []netip.Prefix{netip.MustParsePrefix(c)}); err == nil {
			t.Errorf("carve-out %s accepted", c)
		}
	}
	for _, c := range []string{"198.18.0.0/15", "198.19.0.0/16", "198.19.3.0/24", "127.0.0.1/32", "::1/128"} {
		if _, err := Build(Reserved(), []netip.Prefix{netip.MustParsePrefix(c)}); err != nil {
			t.Errorf("carve-out %s refused: %v", c, err)
		}
	}
}

// TestEffectiveMatchesBlocked checks on random addresses that the written zmap file
// blocks exactly what Blocked says, with and without a carve-out.
func TestEffectiveMatchesBlocked(t *testing.T) {
	extra := []Entry{
		{Prefix: netip.MustParsePrefix("198.19.128.0/17"), Source: SourceFile},
		{Prefix: netip.MustParsePrefix("198.19.1.1/32"), Source: SourceOptOut},
		{Prefix: netip.MustParsePrefix("44.0.0.0/8"), Source: SourceOptOut},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, carve := range [][]netip.Prefix{nil, {netip.MustParsePrefix("198.19.0.0/16")}, {netip.MustParsePrefix("198.18.0.128/25"), netip.MustParsePrefix("127.0.0.0/8")}} {
		l, err := Build(append(Reserved(), extra...), carve)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := l.WriteZmap(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := Parse(&buf, SourceFile, "written")
		if err != nil {
			t.Fatal(err)
		}
		zl, _ := Build(back, nil)
		check := func(a netip.Addr) {
			if got, want := zl.Blocked(a), l.Blocked(a); got != want {
				t.Fatalf("carve %v: %s: zmap file blocks=%v, list blocks=%v", carve, a, got, want)
			}
		}
		for i := 0; i < 200000; i++ {
			v := rng.Uint32()
			if i%2 == 0 { // concentrate on the lab ranges
				v = 0xc6120000 | v&0x1ffff
			}
			check(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}))
		}
		for _, e := range l.Entries {
			if e.Prefix.Addr().Is4() {
				check(e.Prefix.Addr())
				check(lastAddr(e.Prefix))
			}
		}
	}
}

// The testbed's IPv6 space (RFC 5180, inside the reserved 2001::/23) is re-opened for
// contact like 198.18.0.0/15; the rest of 2001::/23 stays blocked.
func TestForContactReopensIPv6Lab(t *testing.T) {
	l, err := ForContact(context.Background(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	for a, want := range map[string]bool{"2001:2:0:8001::1": false, "2001:2:0:8002::60": false,
		"2001:3::1": true, "2001:1::1": true, "198.19.1.0": false, "2001:db8::1": true} {
		if got := l.Blocked(netip.MustParseAddr(a)); got != want {
			t.Errorf("Blocked(%s) = %v, want %v", a, got, want)
		}
	}
}

// TestDirRefusesWhatIsNotAFile: a *.conf that is a FIFO (whose plain open waited for a
// writer forever) or a directory stops Dir with a *listfile.OpenError naming it: the
// operator's exclusions are never read partly.
func TestDirRefusesWhatIsNotAFile(t *testing.T) {
	for name, mk := range map[string]func(dir string) string{
		"fifo.conf": func(dir string) string { return listfiletest.FIFO(t, dir, "fifo.conf") },
		"dir.conf": func(dir string) string {
			p := filepath.Join(dir, "dir.conf")
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "a.conf"), []byte("192.0.2.0/24\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := mk(dir)
		_, err := Dir(dir)
		var oe *listfile.OpenError
		if !errors.As(err, &oe) || oe.File != p || !errors.Is(err, listfile.ErrNotRegular) {
			t.Errorf("%s: %v, want an OpenError naming it, not a regular file", name, err)
		}
	}
}
