package delayline

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestControlSocket: requests over the socket change the table the line gets, keep the
// attributes a set does not name, survive a reload of the base table, and bad requests
// are refused with ErrControl while the table stays as it was.
func TestControlSocket(t *testing.T) {
	base, err := ParseTable(strings.NewReader("default rtt=20ms loss=0.001\n198.19.3.0/24 rtt=8ms jitter=1ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cur := base
	ctl := NewControl(base, func(t *Table) { mu.Lock(); cur = t; mu.Unlock() })
	lookup := func(a string) Profile {
		mu.Lock()
		defer mu.Unlock()
		return cur.Lookup(netip.MustParseAddr(a))
	}
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := ListenControl(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- ctl.ServeControl(ctx, ln) }()
	req := func(s string) (string, error) { return ControlRequest(ctx, sock, s) }

	if _, err := req("set 198.19.3.7 loss=0.05"); err != nil {
		t.Fatal(err)
	}
	want := Profile{OneWay: 4 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.05}
	if got := lookup("198.19.3.7"); got != want {
		t.Fatalf("after set: %+v, want %+v", got, want)
	}
	if got := lookup("198.19.3.8"); got.Loss != 0 {
		t.Fatalf("neighbour changed: %+v", got)
	}
	if base.Lookup(netip.MustParseAddr("198.19.3.7")).Loss != 0 {
		t.Fatal("the base table was modified in place")
	}
	// A second set on the same address changes only what it names.
	if ans, err := req("set 198.19.3.7 rtt=30ms"); err != nil || !strings.Contains(ans, "loss=0.05") {
		t.Fatalf("second set: %q, %v", ans, err)
	}
	if got := lookup("198.19.3.7"); got.OneWay != 15*time.Millisecond || got.Loss != 0.05 {
		t.Fatalf("after second set: %+v", got)
	}
	// Refusals leave the table as it was.
	for _, bad := range []string{"set 198.19.3.7 loss=5", "set 198.19.3.7", "set bogus loss=0.1", "frob", "reset a b", "set 198.19.3.7 speed=1"} {
		if _, err := req(bad); !errors.Is(err, ErrControl) {
			t.Errorf("%q: err %v, want ErrControl", bad, err)
		}
	}
	if got := lookup("198.19.3.7"); got.Loss != 0.05 {
		t.Fatalf("a refused request changed the table: %+v", got)
	}
	// A reload keeps the overrides on top of the new base.
	reloaded, _ := ParseTable(strings.NewReader("default rtt=2ms\n"))
	ctl.SetBase(reloaded)
	if got := lookup("198.19.3.7"); got.Loss != 0.05 || got.OneWay != 15*time.Millisecond {
		t.Fatalf("override lost on reload: %+v", got)
	}
	if got := lookup("198.19.3.8"); got.OneWay != time.Millisecond {
		t.Fatalf("reload not applied: %+v", got)
	}
	if ans, err := req("show"); err != nil || !strings.HasPrefix(ans, "198.19.3.7/32 rtt=30ms") {
		t.Fatalf("show: %q, %v", ans, err)
	}
	if _, err := req("reset"); err != nil {
		t.Fatal(err)
	}
	if got := lookup("198.19.3.7"); got != reloaded.Default {
		t.Fatalf("after reset: %+v, want the default %+v", got, reloaded.Default)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("ServeControl: %v", err)
	}
	if _, err := ControlRequest(context.Background(), sock, "show"); err == nil || errors.Is(err, ErrControl) {
		t.Fatalf("request after stop: %v, want a dial error", err)
	}
}

// TestTableClone: a clone and its original are independent.
func TestTableClone(t *testing.T) {
	a, _ := ParseTable(strings.NewReader("default rtt=2ms\n10.0.0.0/8 rtt=4ms\nvantage 1 rtt=6ms\n"))
	b := a.Clone()
	b.Set(netip.MustParsePrefix("10.1.0.0/16"), Profile{Loss: 1})
	b.Vantage[1] = 0
	if a.Lookup(netip.MustParseAddr("10.1.2.3")).Loss != 0 || a.Vantage[1] != 3*time.Millisecond {
		t.Fatal("Clone shares state with the original")
	}
	if b.Lookup(netip.MustParseAddr("10.2.0.1")).OneWay != 2*time.Millisecond {
		t.Fatal("clone lost the /8 entry")
	}
}
