package cli

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Numeric flags. Every numeric flag of every doqscan tool is registered through one of
// IntVar, Int64Var, Uint64Var, FloatVar or DurationVar: the text is parsed once, here
// (integers in base 10, finite floats, Go durations), and a value that does not parse,
// overflows its type, is NaN or infinite, or lies outside the flag's closed range is
// refused while the flags are parsed, so the tool stops with a usage error (exit code 2)
// naming the flag before anything runs. The range is part of the flag's --help.
//
// A flag whose text has a non-numeric spelling too (zprobe scan --rate max) parses the
// numeric part with ParseInt, ParseFloat or ParseDuration.

// Number is what a numeric flag holds.
type Number interface {
	~int | ~int64 | ~uint64 | ~float64
}

// ErrNotFinite is the refusal of NaN and of infinities.
var ErrNotFinite = errors.New("not a finite number")

// OutOfRangeError is a value that parsed but lies outside [Min, Max].
type OutOfRangeError struct {
	Value, Min, Max string
}

func (e *OutOfRangeError) Error() string {
	return fmt.Sprintf("%s is out of range: want %s..%s", e.Value, e.Min, e.Max)
}

// FlagValueError is the value a numeric flag refused, and why. Parse returns it as a
// usage error (exit code 2).
type FlagValueError struct {
	Flag  string // without dashes
	Value string // as given
	Err   error  // ErrNotFinite, *OutOfRangeError, ...
}

func (e *FlagValueError) Error() string {
	var oe *OutOfRangeError
	if errors.As(e.Err, &oe) {
		return fmt.Sprintf("--%s %s is out of range: want %s..%s", e.Flag, e.Value, oe.Min, oe.Max)
	}
	return fmt.Sprintf("--%s %q: %v", e.Flag, e.Value, e.Err)
}

func (e *FlagValueError) Unwrap() error { return e.Err }

// refused returns the error of the numeric flag of fs that refused its value in the
// last parse (the flag package keeps only the error's text), or nil.
func refused(fs *flag.FlagSet) error {
	var out error
	fs.VisitAll(func(f *flag.Flag) {
		if r, ok := f.Value.(interface{ refusal() *FlagValueError }); ok && out == nil {
			if e := r.refusal(); e != nil {
				out = e
			}
		}
	})
	return out
}

// ParseInt parses s as a base-10 integer in [lo, hi]. Overflow of int64 is an error.
func ParseInt(s string, lo, hi int64) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, numErr(err)
	}
	return v, check(v, lo, hi, formatInt[int64])
}

// ParseUint parses s as a base-10 unsigned integer in [lo, hi]. A sign or overflow of
// uint64 is an error.
func ParseUint(s string, lo, hi uint64) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, numErr(err)
	}
	return v, check(v, lo, hi, formatUint)
}

// ParseFloat parses s as a finite float64 in [lo, hi]: NaN, infinities and values too
// large for a float64 (1e400) are errors.
func ParseFloat(s string, lo, hi float64) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, numErr(err)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, ErrNotFinite
	}
	return v, check(v, lo, hi, formatFloat)
}

// ParseDuration parses s as a Go duration ("1.5s", "250ms", "1h") in [lo, hi]; "0" is
// zero. Overflow of time.Duration is an error.
func ParseDuration(s string, lo, hi time.Duration) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, err // names s already
	}
	return v, check(v, lo, hi, FormatDuration)
}

// FormatDuration prints d as time.Duration does, without the zero units it ends with
// ("1m", "1h", "1m30s", "100ms").
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

var (
	errTooLarge  = errors.New("too large in magnitude for the flag's type")
	errNotNumber = errors.New("not a number in base 10")
)

// numErr replaces strconv's error (which repeats the text; the flag package names the
// text and the flag already).
func numErr(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		switch {
		case errors.Is(ne.Err, strconv.ErrRange):
			return errTooLarge
		case errors.Is(ne.Err, strconv.ErrSyntax):
			return errNotNumber
		}
	}
	return err
}

func check[T int64 | uint64 | float64 | time.Duration](v, lo, hi T, format func(T) string) error {
	if v < lo || v > hi {
		return &OutOfRangeError{Value: format(v), Min: format(lo), Max: format(hi)}
	}
	return nil
}

func formatInt[T ~int | ~int64](v T) string { return strconv.FormatInt(int64(v), 10) }
func formatUint(v uint64) string            { return strconv.FormatUint(v, 10) }
func formatFloat(v float64) string          { return strconv.FormatFloat(v, 'g', -1, 64) }

// numberValue is a flag.Value holding a T in [lo, hi].
type numberValue[T Number] struct {
	p      *T
	lo, hi T
	parse  func(s string) (T, error)
	format func(T) string
	kind   string // the type's name in --help: int, uint, float, duration
	name   string
	failed *FlagValueError // the last Set's refusal
}

// Set parses s once, refusing what is not a T in the flag's range.
func (v *numberValue[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		v.failed = &FlagValueError{Flag: v.name, Value: s, Err: err}
		return v.failed
	}
	v.failed = nil
	*v.p = x
	return nil
}

func (v *numberValue[T]) refusal() *FlagValueError { return v.failed }

// String is the value (the zero value of the type for a zero numberValue, which the
// flag package builds to tell a default from zero).
func (v *numberValue[T]) String() string {
	if v == nil || v.p == nil || v.format == nil {
		return "0"
	}
	return v.format(*v.p)
}

// Get is flag.Getter.
func (v *numberValue[T]) Get() any {
	if v.p == nil {
		return nil
	}
	return *v.p
}

// Range is the flag's closed range as --help prints it, e.g. "1..10000".
func (v *numberValue[T]) Range() string { return v.format(v.lo) + ".." + v.format(v.hi) }

// RangeFlag is a flag.Value that refuses values outside a closed range (every numeric
// flag of the tools); Range says which.
type RangeFlag interface {
	flag.Value
	Range() string
}

func register[T Number](fs *flag.FlagSet, v *numberValue[T], value T, name, usage string) {
	if value < v.lo || value > v.hi {
		panic(fmt.Sprintf("cli: default %s of --%s is outside its range %s", v.format(value), name, v.Range()))
	}
	*v.p = value
	v.name = name
	// A back-quoted word names the value in --help (flag.UnquoteUsage).
	fs.Var(v, name, fmt.Sprintf("%s (`%s` %s)", usage, v.kind, v.Range()))
}

// IntVar defines an int flag with default value that accepts lo..hi.
func IntVar(fs *flag.FlagSet, p *int, name string, value, lo, hi int, usage string) {
	register(fs, &numberValue[int]{p: p, lo: lo, hi: hi, kind: "int", format: formatInt[int],
		parse: func(s string) (int, error) {
			v, err := ParseInt(s, int64(lo), int64(hi))
			return int(v), err
		}}, value, name, usage)
}

// Int64Var defines an int64 flag with default value that accepts lo..hi.
func Int64Var(fs *flag.FlagSet, p *int64, name string, value, lo, hi int64, usage string) {
	register(fs, &numberValue[int64]{p: p, lo: lo, hi: hi, kind: "int", format: formatInt[int64],
		parse: func(s string) (int64, error) { return ParseInt(s, lo, hi) }}, value, name, usage)
}

// Uint64Var defines a uint64 flag with default value that accepts lo..hi.
func Uint64Var(fs *flag.FlagSet, p *uint64, name string, value, lo, hi uint64, usage string) {
	register(fs, &numberValue[uint64]{p: p, lo: lo, hi: hi, kind: "uint", format: formatUint,
		parse: func(s string) (uint64, error) { return ParseUint(s, lo, hi) }}, value, name, usage)
}

// FloatVar defines a float64 flag with default value that accepts finite values in
// lo..hi.
func FloatVar(fs *flag.FlagSet, p *float64, name string, value, lo, hi float64, usage string) {
	register(fs, &numberValue[float64]{p: p, lo: lo, hi: hi, kind: "float", format: formatFloat,
		parse: func(s string) (float64, error) { return ParseFloat(s, lo, hi) }}, value, name, usage)
}

// DurationVar defines a time.Duration flag with default value that accepts lo..hi.
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value, lo, hi time.Duration, usage string) {
	register(fs, &numberValue[time.Duration]{p: p, lo: lo, hi: hi, kind: "duration", format: FormatDuration,
		parse: func(s string) (time.Duration, error) { return ParseDuration(s, lo, hi) }}, value, name, usage)
}
