// Package listfile reads the line-oriented list files the tools take as input (the
// targets files of verify and measure, the blocklist's *.conf files): one entry per
// line, '#' starts a comment, blank lines are skipped. Every error says which file and
// which line; a file that cannot be opened is an *OpenError, bad content a *LineError,
// and cli.ExitCode maps them to "missing prerequisite" (5) and "bad arguments" (2).
// Keyed merges entries that share a key, so a target listed twice is measured once.
package listfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxLine is the longest line accepted, in bytes without the line end. An entry is a
// few hundred bytes at most; a longer line means the wrong file, not an entry.
const MaxLine = 4096

// ErrLineTooLong is the error of a line longer than MaxLine.
var ErrLineTooLong = fmt.Errorf("line longer than %d bytes", MaxLine)

// Stdin is the path that means standard input.
const Stdin = "-"

// LineError is bad content at one line of a list file.
type LineError struct {
	File string // the path, or "-" for standard input
	Line int    // 1-based
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// OpenError is an input file that cannot be opened or read (missing, unreadable, not a
// regular file, a link to nothing; see Open).
type OpenError struct {
	File string
	Err  error
}

func (e *OpenError) Error() string { return fmt.Sprintf("%s: %v", e.File, e.Err) }
func (e *OpenError) Unwrap() error { return e.Err }

// Line is one entry line of a list file.
type Line struct {
	No      int    // 1-based line number
	Text    string // the part before any '#', trimmed; never empty
	Comment string // the part after the first '#', trimmed
}

// Fields splits the line's text at white space.
func (l Line) Fields() []string { return strings.Fields(l.Text) }

// Scan calls fn for every entry line of r; name is the file's name in errors. An error
// returned by fn, or a line longer than MaxLine, stops the scan with a *LineError at
// that line.
func Scan(r io.Reader, name string, fn func(Line) error) error {
	sc := bufio.NewScanner(r)
	// Room for MaxLine bytes plus "\r\n"; a longer line ends the scan with ErrTooLong.
	sc.Buffer(make([]byte, 0, 512), MaxLine+2)
	n := 0
	for sc.Scan() {
		n++
		raw := strings.TrimSuffix(sc.Text(), "\r")
		if len(raw) > MaxLine {
			return &LineError{File: name, Line: n, Err: ErrLineTooLong}
		}
		l := Line{No: n, Text: raw}
		if i := strings.IndexByte(raw, '#'); i >= 0 {
			l.Text, l.Comment = raw[:i], strings.TrimSpace(raw[i+1:])
		}
		if l.Text = strings.TrimSpace(l.Text); l.Text == "" {
			continue
		}
		if err := fn(l); err != nil {
			return &LineError{File: name, Line: n, Err: err}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &LineError{File: name, Line: n + 1, Err: ErrLineTooLong}
		}
		return fmt.Errorf("%s: after line %d: %w", name, n, err)
	}
	return nil
}

// ReadFile scans the list file at path ("-": standard input) with fn (see Scan). The
// file is opened with Open: a FIFO or anything but a regular file is an *OpenError.
func ReadFile(path string, fn func(Line) error) error {
	if path == Stdin {
		return Scan(os.Stdin, path, fn)
	}
	f, err := Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return Scan(f, path, fn)
}

// Keyed collects entries and merges those that share a key, keeping the order of
// their first appearance. Merge combines a later entry into the one kept; nil drops
// the later one. An error from Merge is returned by Add (inside Scan's fn it gets the
// line number of the later entry).
type Keyed[K comparable, T any] struct {
	Merge func(kept *T, next T) error
	index map[K]int
	items []T
}

// Add adds v under key, or merges it into the entry already there.
func (k *Keyed[K, T]) Add(key K, v T) error {
	if k.index == nil {
		k.index = map[K]int{}
	}
	if i, ok := k.index[key]; ok {
		if k.Merge == nil {
			return nil
		}
		return k.Merge(&k.items[i], v)
	}
	k.index[key] = len(k.items)
	k.items = append(k.items, v)
	return nil
}

// Items returns the entries, one per key, in the order their keys first appeared.
func (k *Keyed[K, T]) Items() []T { return k.items }

// Len is the number of distinct keys.
func (k *Keyed[K, T]) Len() int { return len(k.items) }

// Entries reads a list file of keyed entries: Parse makes each entry line an entry and
// its key, and entries that share a key are merged as by a Keyed with Merge. Its Scan
// and ReadFile return the entries, one per key, in the order their keys first appeared;
// on an error, those read before it.
type Entries[K comparable, T any] struct {
	Parse func(Line) (K, T, error)
	Merge func(kept *T, next T) error
}

// Scan reads the entries of r; name is the file's name in errors (see Scan).
func (e Entries[K, T]) Scan(r io.Reader, name string) ([]T, error) {
	k := Keyed[K, T]{Merge: e.Merge}
	err := Scan(r, name, e.into(&k))
	return k.Items(), err
}

// ReadFile reads the entries of the list file at path ("-": standard input; see ReadFile).
func (e Entries[K, T]) ReadFile(path string) ([]T, error) {
	k := Keyed[K, T]{Merge: e.Merge}
	err := ReadFile(path, e.into(&k))
	return k.Items(), err
}

func (e Entries[K, T]) into(k *Keyed[K, T]) func(Line) error {
	return func(l Line) error {
		key, v, err := e.Parse(l)
		if err != nil {
			return err
		}
		return k.Add(key, v)
	}
}
