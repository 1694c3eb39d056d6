package listfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Opening input files. Every tool opens the files it is given to read (targets, lists,
// blocklists, query files, hitlists, qlogs, a study's files, certificate roots, GeoIP
// databases) with Open, and lists the files under a directory it is given with Walk:
// a named pipe, socket or device is refused at once with an error naming it (a plain
// open of a FIFO waits for a writer forever), a link is followed to what it names, and
// a link that names nothing is an error, never a file silently missing.

// ErrNotRegular is the error of a path that names neither a regular file nor (where a
// directory is read) a directory: a named pipe, a socket, a device.
var ErrNotRegular = errors.New("not a regular file")

// ErrDanglingLink is the error of a symbolic link whose target does not exist.
var ErrDanglingLink = errors.New("a symbolic link to nothing")

// Open opens the regular file at path (or what a link there names) for reading. It
// never blocks: the open does not wait for a FIFO's writer, and anything but a regular
// file is refused with ErrNotRegular. Errors are *OpenError naming path.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		// A socket cannot be opened at all (ENXIO): say what it is.
		if st, serr := os.Stat(path); serr == nil && !st.Mode().IsRegular() {
			return nil, &OpenError{File: path, Err: notRegular(st.Mode())}
		}
		return nil, &OpenError{File: path, Err: openCause(path, err)}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, &OpenError{File: path, Err: err}
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &OpenError{File: path, Err: notRegular(st.Mode())}
	}
	// O_NONBLOCK does not change reads of a regular file; clear it all the same, so the
	// file behaves as one opened plainly.
	if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, &OpenError{File: path, Err: err}
	}
	return f, nil
}

// ReadAll reads the regular file at path (see Open) whole; a file larger than max
// bytes (max > 0) is an *OpenError wrapping ErrTooLarge.
func ReadAll(path string, max int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := io.Reader(f)
	if max > 0 {
		r = io.LimitReader(f, max+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, &OpenError{File: path, Err: err}
	}
	if max > 0 && int64(len(b)) > max {
		return nil, &OpenError{File: path, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)}
	}
	return b, nil
}

// ErrTooLarge is the error of a file larger than the reader's bound.
var ErrTooLarge = errors.New("file too large")

// Walk calls fn for root and, when root is a directory (or a link to one), for every
// entry below it, depth first in lexical order, under the names as reached from root
// (links are not resolved in the names). mode is what the path leads to after links:
// a regular file or a directory (fn is called for a directory before its entries; a
// fs.SkipDir from fn skips them); err is not nil for anything else (a FIFO, socket or
// device: ErrNotRegular; a link to nothing: ErrDanglingLink; an entry or directory that
// cannot be read), as an *OpenError naming the path, and mode is then 0. Links to
// directories are followed, each directory once (a link loop ends there). An error
// returned by fn stops the walk and is returned.
func Walk(root string, fn func(path string, mode fs.FileMode, err error) error) error {
	w := walker{fn: fn, seen: map[fileID]bool{}}
	err := w.walk(root)
	if errors.Is(err, fs.SkipDir) {
		return nil
	}
	return err
}

type fileID struct{ dev, ino uint64 }

type walker struct {
	fn   func(string, fs.FileMode, error) error
	seen map[fileID]bool
}

func (w *walker) walk(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return w.fn(path, 0, &OpenError{File: path, Err: openCause(path, err)})
	}
	switch {
	case st.Mode().IsRegular():
		return w.fn(path, st.Mode(), nil)
	case !st.IsDir():
		return w.fn(path, 0, &OpenError{File: path, Err: notRegular(st.Mode())})
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id := fileID{uint64(sys.Dev), sys.Ino}
		if w.seen[id] {
			return nil // already walked under another name (a link to it, a link loop)
		}
		w.seen[id] = true
	}
	if err := w.fn(path, st.Mode(), nil); err != nil {
		if errors.Is(err, fs.SkipDir) {
			return nil
		}
		return err
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return w.fn(path, 0, &OpenError{File: path, Err: err})
	}
	for _, e := range ents {
		if err := w.walk(filepath.Join(path, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// openCause says why path could not be opened or followed: a link to nothing is
// ErrDanglingLink (the plain error would say the link itself does not exist).
func openCause(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		if lst, lerr := os.Lstat(path); lerr == nil && lst.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			return fmt.Errorf("%w (%s)", ErrDanglingLink, target)
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err // OpenError names the path already
	}
	return err
}

// notRegular names the kind of file a mode is.
func notRegular(m fs.FileMode) error {
	kind := "a special file"
	switch {
	case m.IsDir():
		kind = "a directory"
	case m&fs.ModeNamedPipe != 0:
		kind = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		kind = "a socket"
	case m&fs.ModeCharDevice != 0:
		kind = "a character device"
	case m&fs.ModeDevice != 0:
		kind = "a block device"
	}
	return fmt.Errorf("%w: %s", ErrNotRegular, kind)
}
