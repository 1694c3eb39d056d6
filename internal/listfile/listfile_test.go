package listfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func collect(t *testing.T, content string) ([]Line, error) {
	t.Helper()
	var got []Line
	err := Scan(strings.NewReader(content), "list.txt", func(l Line) error {
		got = append(got, l)
		return nil
	})
	return got, err
}

func TestScanSkipsCommentsAndBlankLines(t *testing.T) {
	got, err := collect(t, "# header\n\n a b  # note\r\n\t\nc\n#\nd")
	if err != nil {
		t.Fatal(err)
	}
	want := []Line{{No: 3, Text: "a b", Comment: "note"}, {No: 5, Text: "c"}, {No: 7, Text: "d"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestLongLineNamesItsLine: a 200 KB line is an error that names the file and the line
// (bufio.Scanner alone says "token too long" and nothing else).
func TestLongLineNamesItsLine(t *testing.T) {
	for _, c := range []struct {
		name    string
		content string
		line    int // 0: accepted
	}{
		{"200 KB", "a\n# b\n" + strings.Repeat("x", 200<<10) + "\nc\n", 3},
		{"200 KB at EOF", "a\n" + strings.Repeat("x", 200<<10), 2},
		{"MaxLine+1", "a\n" + strings.Repeat("x", MaxLine+1) + "\n", 2},
		{"MaxLine", "a\n" + strings.Repeat("x", MaxLine) + "\r\n", 0},
		{"MaxLine at EOF", strings.Repeat("x", MaxLine), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := collect(t, c.content)
			if c.line == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != c.line || le.File != "list.txt" || !errors.Is(err, ErrLineTooLong) {
				t.Fatalf("got %v, want a LineError at list.txt:%d", err, c.line)
			}
			if want := "list.txt:" + string(rune('0'+c.line)) + ":"; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("message %q does not start with %q", err, want)
			}
		})
	}
}

func TestParseErrorNamesItsLine(t *testing.T) {
	bad := errors.New("bad entry")
	err := Scan(strings.NewReader("ok\n\nbroken\nok\n"), "t.txt", func(l Line) error {
		if l.Text == "broken" {
			return bad
		}
		return nil
	})
	var le *LineError
	if !errors.As(err, &le) || le.Line != 3 || !errors.Is(err, bad) || err.Error() != "t.txt:3: bad entry" {
		t.Fatalf("got %v", err)
	}
}

func TestReadFileMissingIsOpenError(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.txt")
	err := ReadFile(p, func(Line) error { return nil })
	var oe *OpenError
	if !errors.As(err, &oe) || oe.File != p || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want an OpenError for %s", err, p)
	}
}

func TestKeyedMergesInFirstOrder(t *testing.T) {
	k := Keyed[string, []int]{Merge: func(kept *[]int, next []int) error {
		*kept = append(*kept, next...)
		return nil
	}}
	for _, e := range []struct {
		k string
		v int
	}{{"b", 1}, {"a", 2}, {"b", 3}, {"c", 4}, {"a", 5}} {
		if err := k.Add(e.k, []int{e.v}); err != nil {
			t.Fatal(err)
		}
	}
	got := k.Items()
	if len(got) != 3 || k.Len() != 3 || len(got[0]) != 2 || got[0][1] != 3 || got[1][1] != 5 || got[2][0] != 4 {
		t.Fatalf("got %v", got)
	}
	var drop Keyed[string, int]
	_ = drop.Add("x", 1)
	_ = drop.Add("x", 2)
	if it := drop.Items(); len(it) != 1 || it[0] != 1 {
		t.Fatalf("without Merge: %v, want the first entry only", it)
	}
}

// TestEntriesKeyAndMerge: Entries parses each line into a keyed entry, merges a key's
// later entries into its first, and stops at a bad line with the entries read before.
func TestEntriesKeyAndMerge(t *testing.T) {
	e := Entries[string, []string]{
		Parse: func(l Line) (string, []string, error) {
			f := l.Fields()
			if len(f) != 2 {
				return "", nil, errors.New("want KEY VALUE")
			}
			return f[0], f[1:], nil
		},
		Merge: func(kept *[]string, next []string) error {
			*kept = append(*kept, next...)
			return nil
		},
	}
	got, err := e.Scan(strings.NewReader("b 1\na 2\nb 3 # c\n"), "list.txt")
	if err != nil || len(got) != 2 || strings.Join(got[0], ",") != "1,3" || strings.Join(got[1], ",") != "2" {
		t.Fatalf("got %v, %v", got, err)
	}
	got, err = e.Scan(strings.NewReader("a 1\nbad\nc 3\n"), "list.txt")
	var le *LineError
	if !errors.As(err, &le) || le.Line != 2 || len(got) != 1 {
		t.Fatalf("got %v, %v; want a LineError at line 2 after one entry", got, err)
	}
	p := filepath.Join(t.TempDir(), "list.txt")
	if err := os.WriteFile(p, []byte("x 1\nx 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.Merge = nil
	if got, err = e.ReadFile(p); err != nil || len(got) != 1 || got[0][0] != "1" {
		t.Fatalf("ReadFile without Merge: %v, %v; want the first entry only", got, err)
	}
}

// FuzzScan: any input gives entries that are trimmed, non-empty, comment-free and no
// longer than MaxLine, in increasing line order, or a LineError with a line number.
func FuzzScan(f *testing.F) {
	f.Add("a\n# c\n b # d\r\n")
	f.Add(strings.Repeat("y", MaxLine+3))
	f.Fuzz(func(t *testing.T, s string) {
		last := 0
		err := Scan(strings.NewReader(s), "f", func(l Line) error {
			if l.Text == "" || l.Text != strings.TrimSpace(l.Text) || strings.Contains(l.Text, "#") ||
				len(l.Text) > MaxLine || l.No <= last {
				t.Fatalf("bad line %+v after %d from %q", l, last, s)
			}
			last = l.No
			return nil
		})
		var le *LineError
		if err != nil && (!errors.As(err, &le) || le.Line <= last) {
			t.Fatalf("error %v after line %d", err, last)
		}
	})
}
