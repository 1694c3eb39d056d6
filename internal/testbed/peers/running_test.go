package peers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ListRunning reports each pid file's peer as alive only while that pid runs the
// recorded binary; malformed files are listed, not alive.
func TestListRunning(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A pid that has certainly exited: a child we waited for.
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Skipf("SKIP: cannot run true: %v", err)
	}
	files := map[string]string{
		"alive-peer.pid":   fmt.Sprintf("%d %s\n", os.Getpid(), exe),
		"dead-peer.pid":    fmt.Sprintf("%d /usr/bin/true\n", c.Process.Pid),
		"garbage-peer.pid": "not a pid\n",
		"wrongbin.pid":     fmt.Sprintf("%d /usr/bin/coredns\n", os.Getpid()),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ListRunning(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"alive-peer": true, "dead-peer": false, "garbage-peer": false, "wrongbin": false}
	if len(got) != len(want) {
		t.Fatalf("listed %d peers, want %d: %+v", len(got), len(want), got)
	}
	for _, r := range got {
		if alive, ok := want[r.Name]; !ok || r.Alive != alive {
			t.Errorf("%+v: want alive=%v (listed: %v)", r, alive, ok)
		}
	}
	if got[0].Name != "alive-peer" || got[0].Pid != os.Getpid() || got[0].Binary != filepath.Base(exe) {
		t.Errorf("first entry %+v", got[0])
	}
	if none, err := ListRunning(filepath.Join(dir, "absent")); err != nil || len(none) != 0 {
		t.Errorf("absent directory: %v, %v", none, err)
	}
}
