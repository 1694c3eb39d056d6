package listfile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
)

// specials makes one of every kind of path that is not a regular file in dir and
// returns them by name.
func specials(t *testing.T, dir string) map[string]string {
	t.Helper()
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "absent"), dangling); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"fifo": listfiletest.FIFO(t, dir, "fifo"), "socket": sock, "dangling link": dangling,
		"directory": dir, "character device": "/dev/null"}
}

// TestOpenRefusesWhatIsNotARegularFile: a FIFO (whose plain open waits for a writer),
// a socket, a device, a directory and a link to nothing are each an *OpenError naming
// the path and saying what it is; a link to a regular file opens that file.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	for kind, p := range specials(t, dir) {
		f, err := Open(p)
		if err == nil {
			f.Close()
		}
		var oe *OpenError
		if !errors.As(err, &oe) || oe.File != p {
			t.Errorf("%s: Open(%s) = %v, want an *OpenError naming it", kind, p, err)
			continue
		}
		want := ErrNotRegular
		if kind == "dangling link" {
			want = ErrDanglingLink
		}
		if !errors.Is(err, want) || (kind != "dangling link" && !strings.Contains(err.Error(), strings.Fields(kind)[0])) {
			t.Errorf("%s: %v, want %v saying what it is", kind, err, want)
		}
	}
	// ReadFile (the list files' reader) refuses the FIFO too, instead of reading it.
	if err := ReadFile(filepath.Join(dir, "fifo"), func(Line) error { return nil }); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFile(fifo) = %v, want %v", err, ErrNotRegular)
	}
	real := filepath.Join(dir, "real.txt")
	if err := os.WriteFile(real, []byte("127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	b, err := ReadAll(link, 100)
	if err != nil || string(b) != "127.0.0.1\n" {
		t.Errorf("ReadAll(link to a file) = %q, %v", b, err)
	}
	if _, err := ReadAll(real, 5); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadAll beyond its bound: %v, want %v", err, ErrTooLarge)
	}
}

// TestWalkFollowsLinksAndNamesTheRest: a link to a directory is walked like the
// directory (as the root and inside it), under the names reached from the root; links
// to files are files; a link loop ends; every FIFO, socket and link to nothing below the
// root gets its own error, and the walk goes on past it.
func TestWalkFollowsLinksAndNamesTheRest(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	sub := filepath.Join(data, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(data, "a.txt"), filepath.Join(sub, "b.txt")} {
		if err := os.WriteFile(f, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(base, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "c.txt"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		filepath.Join(data, "to-other"): other,                          // a link to a directory outside
		filepath.Join(data, "to-a.txt"): filepath.Join(data, "a.txt"),   // a link to a file
		filepath.Join(sub, "loop"):      data,                           // a loop back to the root
		filepath.Join(data, "zz-gone"):  filepath.Join(base, "nowhere"), // a link to nothing
		filepath.Join(base, "link"):     data,                           // the root as a link
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	listfiletest.FIFO(t, sub, "pipe")

	type entry struct {
		path string
		dir  bool
		err  error
	}
	walk := func(root string) []entry {
		var got []entry
		if err := Walk(root, func(p string, mode fs.FileMode, err error) error {
			got = append(got, entry{p, mode.IsDir(), err})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, root := range []string{data, filepath.Join(base, "link"), filepath.Join(base, "link") + "/"} {
		got := walk(root)
		var files, dirs, bad []string
		for _, e := range got {
			rel, _ := filepath.Rel(root, e.path)
			switch {
			case e.err != nil:
				var oe *OpenError
				if !errors.As(e.err, &oe) || oe.File != e.path {
					t.Errorf("%s: error %v does not name the path", e.path, e.err)
				}
				bad = append(bad, rel)
			case e.dir:
				dirs = append(dirs, rel)
			default:
				files = append(files, rel)
			}
		}
		if w := "a.txt sub/b.txt to-a.txt to-other/c.txt"; strings.Join(files, " ") != w {
			t.Errorf("%s: files %q, want %q", root, files, w)
		}
		if w := ". sub to-other"; strings.Join(dirs, " ") != w {
			t.Errorf("%s: directories %q, want %q", root, dirs, w)
		}
		if w := "sub/pipe zz-gone"; strings.Join(bad, " ") != w {
			t.Errorf("%s: errors %q, want %q", root, bad, w)
		}
	}
	// A file as the root is itself; a root that does not exist is one error.
	if got := walk(filepath.Join(data, "a.txt")); len(got) != 1 || got[0].err != nil || got[0].dir {
		t.Errorf("file root: %+v", got)
	}
	if got := walk(filepath.Join(base, "absent")); len(got) != 1 || !errors.Is(got[0].err, fs.ErrNotExist) {
		t.Errorf("missing root: %+v", got)
	}
}
