package dataset

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// checkText refuses a text file (list or CSV) that cannot be read faithfully, at the
// line where it goes wrong: bytes that are not UTF-8 (a Latin-1 name would be stored as
// U+FFFD, or refused by PostgreSQL without a file or line), a NUL byte (which no
// PostgreSQL text holds), and a last line without its line end: a file cut short
// (`head -c`) whose last line reads as a shorter, wrong value (178.79.168.139 cut to
// 178.79.168.1). Every file the study published ends its last line.
func checkText(data []byte) *lineError {
	line, start := 1, 0
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == '\n':
			line, start = line+1, i+1
			i++
			continue
		case c == 0:
			return &lineError{line, malformed("a NUL byte at column %d", i-start+1)}
		case c < utf8.RuneSelf:
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return &lineError{line, malformed("byte 0x%02x at column %d is not UTF-8 (convert the file to UTF-8)", c, i-start+1)}
		}
		i += size
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		return &lineError{line, malformed("the last line has no line end: the file is cut short")}
	}
	return nil
}

// errNotText is what checkString says of a value PostgreSQL's text cannot hold.
var errNotText = errors.New("not storable as text")

// checkString refuses a value decoded from a file (a SQLite text column, a JSON string)
// that PostgreSQL's text cannot hold or that the decoder had to replace: bytes that are
// not UTF-8, a NUL. replaced counts the U+FFFD the source itself spelled (a JSON \ufffd
// escape or the character); more in s means the decoder replaced something (a JSON
// escape of a lone surrogate).
func checkString(s string, replaced int) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %q", errNotText, clip(s))
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: a NUL character in %q", errNotText, clip(s))
	case strings.Count(s, "\ufffd") > replaced:
		return fmt.Errorf("%w: an escape that is no character (a lone surrogate) in %q", errNotText, clip(s))
	}
	return nil
}
