package dbctl_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/dbctl"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestAgainstDatabaseURL: with DATABASE_URL set, url prints it, up and status print the
// schema version of that database, and stop leaves the external server alone.
func TestAgainstDatabaseURL(t *testing.T) {
	url := storetest.UseDatabase(t)
	want := map[string]string{
		"url":    url + "\n",
		"up":     fmt.Sprintf("schema version %d (this binary: %d)\n", store.SchemaVersion(), store.SchemaVersion()),
		"status": fmt.Sprintf("schema version %d (this binary: %d)\n", store.SchemaVersion(), store.SchemaVersion()),
		"stop":   "",
	}
	for _, sub := range []string{"url", "up", "status", "stop", "status"} {
		var out, stderr bytes.Buffer
		if code := dbctl.Tool(&out).RunMain([]string{sub}, &stderr); code != cli.ExitOK {
			t.Fatalf("%s: exit %d: %s", sub, code, stderr.String())
		}
		got := out.String()
		if sub == "status" {
			// Then the partitions: this month's measurements among them.
			first, rest, _ := strings.Cut(got, "\n")
			got = first + "\n"
			if !strings.Contains(rest, "measurements_p") || !strings.Contains(rest, "attached") {
				t.Errorf("status lists no attached measurements partition:\n%s", rest)
			}
		}
		if got != want[sub] {
			t.Errorf("%s printed %q, want %q", sub, out.String(), want[sub])
		}
	}
}

// TestUnreachableDatabase: status against a server that does not answer is exit code 3.
func TestUnreachableDatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "host=/nonexistent-doqscan-socket dbname=doqscan user=doqscan connect_timeout=1")
	var stderr bytes.Buffer
	if code := dbctl.Tool(io.Discard).RunMain([]string{"status"}, &stderr); code != cli.ExitDatabase {
		t.Fatalf("exit %d (%s), want %d", code, stderr.String(), cli.ExitDatabase)
	}
}
