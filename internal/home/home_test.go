package home

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDirFromEnvIsAbsolute(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	t.Setenv(Env, "inst")
	if got, want := Dir(), filepath.Join(base, "inst"); got != want {
		t.Fatalf("Dir() with %s=inst in %s = %q, want %q", Env, base, got, want)
	}
	if got, want := Path("var", "scans"), filepath.Join(base, "inst", "var", "scans"); got != want {
		t.Fatalf("Path(var, scans) = %q, want %q", got, want)
	}
}

// From any directory of the source tree, the home is the tree's root (the one with
// go.mod and schema.sql), not the working directory.
func TestDirFindsSourceTreeFromSubdirectory(t *testing.T) {
	t.Setenv(Env, "")
	os.Unsetenv(Env)
	wd, _ := os.Getwd()
	root := filepath.Dir(filepath.Dir(wd)) // internal/home -> repository root
	if _, err := os.Stat(filepath.Join(root, "schema.sql")); err != nil {
		t.Fatalf("test layout: %v", err)
	}
	if got := Dir(); got != root {
		t.Fatalf("Dir() from %s = %q, want the repository root %q", wd, got, root)
	}
	if !filepath.IsAbs(Path("var", "scans")) {
		t.Fatalf("Path(var, scans) = %q is relative", Path("var", "scans"))
	}
}

// Outside the source tree (and with the test binary outside any installation), the
// home is the fallback, never the working directory.
func TestDirNeverTheWorkingDirectory(t *testing.T) {
	t.Setenv(Env, "")
	os.Unsetenv(Env)
	dir := t.TempDir()
	t.Chdir(dir)
	exe, _ := os.Executable()
	if got := Dir(); got == dir || !filepath.IsAbs(got) {
		t.Fatalf("Dir() in %s (executable %s) = %q: want an absolute home other than the working directory", dir, exe, got)
	}
}

// An installation without the source tree (a container image, a copied bin/): the
// directory above the executable's bin/ when it holds schema.sql.
func TestResolveInstallation(t *testing.T) {
	inst := t.TempDir()
	os.MkdirAll(filepath.Join(inst, "bin"), 0o755)
	elsewhere := t.TempDir()
	exe := filepath.Join(inst, "bin", "zprobe")
	if got := resolve("", elsewhere, exe); got != Fallback {
		t.Fatalf("without schema.sql: resolve = %q, want %q", got, Fallback)
	}
	os.WriteFile(filepath.Join(inst, "schema.sql"), nil, 0o644)
	if got := resolve("", elsewhere, exe); got != inst {
		t.Fatalf("installation: resolve = %q, want %q", got, inst)
	}
	if got := resolve("/opt/doqscan/", elsewhere, exe); got != "/opt/doqscan" {
		t.Fatalf("env wins: resolve = %q", got)
	}
	if got := resolve("", "", ""); got != Fallback {
		t.Fatalf("nothing known: resolve = %q, want %q", got, Fallback)
	}
}
