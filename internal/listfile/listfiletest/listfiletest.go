// Package listfiletest makes the input files that are not regular files, for the tests
// of every reader of files (listfile.Open, Walk and their callers).
package listfiletest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FIFO makes a named pipe at dir/name with a writer waiting for a reader: a plain open
// of the pipe for reading then returns, reads nothing and sees the writer close, so a
// reader that does not refuse the pipe ends (with the wrong result) instead of hanging
// the test. The writer is released when the test ends.
func FIFO(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v (the file system refuses named pipes)", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if w, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
	}()
	t.Cleanup(func() {
		// A reader that holds the pipe open lets the writer's open return.
		if r, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-done
			r.Close()
		}
	})
	return p
}

// Symlink makes a symbolic link at link to target.
func Symlink(t testing.TB, target, link string) string {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	return link
}
