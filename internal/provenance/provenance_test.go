package provenance

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestBuildFromLinkerFlags: the revision and modified flag set at link time win over
// the binary's embedded VCS information; without either the revision is "unknown".
func TestBuildFromLinkerFlags(t *testing.T) {
	defer func(r, m string) { revision, modified = r, m }(revision, modified)
	revision, modified = "0123456789abcdef0123456789abcdef01234567", "true"
	b := ReadBuild()
	if b.Revision != revision || !b.Modified || b.GoVersion != runtime.Version() || b.Version == "" {
		t.Fatalf("ReadBuild = %+v", b)
	}
	if got, want := b.String(), b.Version+" (revision 0123456789ab, modified; "+runtime.Version()+")"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	revision, modified = "", ""
	if b := ReadBuild(); b.Revision == "" { // "unknown" under go test -buildvcs=false, else the embedded commit
		t.Fatalf("without linker flags: revision %q", b.Revision)
	}
}

// TestVersionOfBuiltBinary builds a tool the way ./dev build does (the revision passed
// with -ldflags -X, VCS stamping off) and checks that --version prints the release and
// that revision; a build without the flag says "unknown".
func TestVersionOfBuiltBinary(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain on PATH to build a binary with")
	}
	root, _ := filepath.Abs("../..")
	dir := t.TempDir()
	const rev = "feedfacecafebeef0123456789abcdef01234567"
	build := func(out string, ldflags string) {
		cmd := exec.Command(goBin, "build", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/dbctl")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
	}
	version := func(bin string) string {
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", bin, err)
		}
		return strings.TrimSpace(string(out))
	}
	stamped := filepath.Join(dir, "dbctl")
	build(stamped, "-X github.com/doqscan/doqscan/internal/provenance.revision="+rev)
	got := version(stamped)
	if !regexp.MustCompile(`^dbctl [0-9]+\.[0-9]+\.[0-9]+\S* \(revision feedfacecafe; go[0-9.]+\S*\)$`).MatchString(got) {
		t.Fatalf("stamped --version = %q", got)
	}
	plain := filepath.Join(dir, "dbctl-plain")
	build(plain, "")
	if got := version(plain); !strings.Contains(got, "(revision unknown;") {
		t.Fatalf("unstamped --version = %q, want revision unknown", got)
	}
	t.Logf("--version: %q", got)
}
