package cli_test

import (
	"bytes"
	"context"
	"flag"
	"go/ast"
	"go/token"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
)

// numFlags is a command with one numeric flag of each kind.
type numFlags struct {
	i   int
	i64 int64
	u64 uint64
	f   float64
	d   time.Duration
}

func newNumFlags() (*flag.FlagSet, *cli.Common, *numFlags) {
	var common cli.Common
	var n numFlags
	fs := cli.NewFlagSet(cli.Command{Name: "tool", Summary: "test", Usage: "tool"}, &common)
	cli.IntVar(fs, &n.i, "workers", 10, 1, 10000, "workers")
	cli.Int64Var(fs, &n.i64, "count", 0, 0, 1<<40, "count")
	cli.Uint64Var(fs, &n.u64, "seed", 1, 0, math.MaxUint64, "seed")
	cli.FloatVar(fs, &n.f, "rate", 1000, 0.001, 1e7, "rate")
	cli.DurationVar(fs, &n.d, "timeout", time.Second, time.Millisecond, time.Minute, "timeout")
	return fs, &common, &n
}

func runNum(t *testing.T, args ...string) (int, string, *numFlags) {
	t.Helper()
	fs, common, n := newNumFlags()
	var stderr bytes.Buffer
	ran := false
	code := cli.RunMain(fs, common, args, &stderr, func(context.Context, *slog.Logger, []string) error {
		ran = true
		return nil
	})
	if ran != (code == cli.ExitOK) {
		t.Errorf("%q: exit %d but the run function ran: %v", args, code, ran)
	}
	return code, stderr.String(), n
}

// TestNumericFlagsRefuse: NaN, infinities, overflow of the type (also values that a
// narrower type downstream would wrap, like 2^32), signs where none fit, text, and values
// outside the range are refused while the flags are parsed: exit code 2, one line naming
// the flag, and the run never starts.
func TestNumericFlagsRefuse(t *testing.T) {
	for _, c := range []struct{ flag, value string }{
		{"rate", "NaN"}, {"rate", "nan"}, {"rate", "Inf"}, {"rate", "+Inf"}, {"rate", "-Inf"}, {"rate", "infinity"},
		{"rate", "1e400"}, {"rate", "-1"}, {"rate", "0"}, {"rate", "1e7000000000"}, {"rate", "10000000.5"},
		{"rate", ""}, {"rate", "fast"}, {"rate", "1,5"},
		{"workers", "0"}, {"workers", "-1"}, {"workers", "4294967296"}, {"workers", "9223372036854775808"},
		{"workers", "1.5"}, {"workers", "0x10"}, {"workers", " 5"}, {"workers", "NaN"}, {"workers", "10001"},
		{"count", "-1"}, {"count", "1099511627777"}, {"count", "18446744073709551616"},
		{"seed", "-1"}, {"seed", "18446744073709551616"}, {"seed", "1e3"},
		{"timeout", "0s"}, {"timeout", "0"}, {"timeout", "-1s"}, {"timeout", "1m0.001s"}, {"timeout", "999us"},
		{"timeout", "10"}, {"timeout", "9999999999h"}, {"timeout", "NaN"},
	} {
		code, out, _ := runNum(t, "--"+c.flag, c.value)
		if code != cli.ExitUsage || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "-"+c.flag) {
			t.Errorf("--%s %q: exit %d, stderr %q; want %d and one line naming the flag", c.flag, c.value, code, out, cli.ExitUsage)
		}
	}
}

// TestNumericFlagsAccept: the ends of every range, and the defaults when unset.
func TestNumericFlagsAccept(t *testing.T) {
	code, out, n := runNum(t)
	if code != cli.ExitOK || n.i != 10 || n.i64 != 0 || n.u64 != 1 || n.f != 1000 || n.d != time.Second {
		t.Fatalf("defaults: exit %d %q, %+v", code, out, *n)
	}
	code, out, n = runNum(t, "--workers", "1", "--count", "1099511627776", "--seed", "18446744073709551615",
		"--rate", "0.001", "--timeout", "1ms")
	if code != cli.ExitOK || n.i != 1 || n.i64 != 1<<40 || n.u64 != math.MaxUint64 || n.f != 0.001 || n.d != time.Millisecond {
		t.Fatalf("lower ends: exit %d %q, %+v", code, out, *n)
	}
	code, out, n = runNum(t, "--workers", "10000", "--count", "0", "--seed", "0", "--rate", "1e7", "--timeout", "1m")
	if code != cli.ExitOK || n.i != 10000 || n.i64 != 0 || n.u64 != 0 || n.f != 1e7 || n.d != time.Minute {
		t.Fatalf("upper ends: exit %d %q, %+v", code, out, *n)
	}
}

// TestNumericFlagsHelp: --help shows each flag's type and range, and its default.
func TestNumericFlagsHelp(t *testing.T) {
	fs, _, _ := newNumFlags()
	var b bytes.Buffer
	fs.SetOutput(&b)
	fs.PrintDefaults()
	for _, want := range []string{
		"-workers int\n", "(int 1..10000) (default 10)",
		"-rate float\n", "(float 0.001..1e+07) (default 1000)",
		"-timeout duration\n", "(duration 1ms..1m) (default 1s)",
		"-seed uint\n", "(uint 0..18446744073709551615) (default 1)",
		"-count int\n", "(int 0..1099511627776)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "panic") {
		t.Errorf("help:\n%s", b.String())
	}
}

// TestNumericDefaultOutsideRange: a default outside the flag's own range is a
// programming error caught when the flag is defined.
func TestNumericDefaultOutsideRange(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for a default outside the range")
		}
	}()
	var n int
	cli.IntVar(flag.NewFlagSet("x", flag.ContinueOnError), &n, "workers", 0, 1, 10, "workers")
}

// The fuzz tests below hold every flag parser to its contract: what it accepts lies in
// the range, is finite, and reads back as itself; nothing panics. Their seed corpus
// (testdata/fuzz) holds the inputs that once went through wrapped: 2^32, NaN, 1e400.

func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"0", "1", "-1", "10000", "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "0x10", "1e3", "NaN", "", "+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range [][2]int64{{1, 10000}, {0, 1 << 31}, {math.MinInt64, math.MaxInt64}} {
			v, err := cli.ParseInt(s, r[0], r[1])
			if err != nil {
				continue
			}
			if v < r[0] || v > r[1] {
				t.Fatalf("ParseInt(%q, %d, %d) = %d", s, r[0], r[1], v)
			}
			if back, err := strconv.ParseInt(strconv.FormatInt(v, 10), 10, 64); err != nil || back != v {
				t.Fatalf("ParseInt(%q) = %d does not read back", s, v)
			}
		}
	})
}

func FuzzParseUint(f *testing.F) {
	for _, s := range []string{"0", "18446744073709551615", "18446744073709551616", "-0", "-1", "+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := cli.ParseUint(s, 1, 1<<32)
		if err == nil && (v < 1 || v > 1<<32) {
			t.Fatalf("ParseUint(%q) = %d", s, v)
		}
	})
}

func FuzzParseFloat(f *testing.F) {
	for _, s := range []string{"0", "1e7", "1e400", "-1e400", "NaN", "-NaN", "Inf", "+Inf", "-Inf", "infinity", "0x1p-2", "1_000", "4294967296", "1e-400", "-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range [][2]float64{{0, 1e7}, {0.001, 10000}, {-math.MaxFloat64, math.MaxFloat64}} {
			v, err := cli.ParseFloat(s, r[0], r[1])
			if err != nil {
				continue
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < r[0] || v > r[1] {
				t.Fatalf("ParseFloat(%q, %v, %v) = %v", s, r[0], r[1], v)
			}
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0", "0s", "1ms", "1m", "-1s", "9223372036854775807ns", "9223372036854775808ns", "2562048h", "1.5h", "10", "NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range [][2]time.Duration{{time.Millisecond, time.Minute}, {0, 168 * time.Hour}, {math.MinInt64, math.MaxInt64}} {
			v, err := cli.ParseDuration(s, r[0], r[1])
			if err != nil {
				continue
			}
			if v < r[0] || v > r[1] {
				t.Fatalf("ParseDuration(%q, %v, %v) = %v", s, r[0], r[1], v)
			}
			if back, err := time.ParseDuration(cli.FormatDuration(v)); err != nil || back != v {
				t.Fatalf("ParseDuration(%q) = %v prints as %q, which reads back as %v (%v)", s, v, cli.FormatDuration(v), back, err)
			}
		}
	})
}

// flagMethods are the flag package's numeric flag definers, which take any value their
// type holds (NaN, 0 for a count that needs 1 or more, 2^32 for what zmap reads as 32
// bits): product code uses cli's range-checked ones instead.
var flagMethods = map[string]int{ // name -> arguments of a flag definition
	"IntVar": 4, "Int64Var": 4, "UintVar": 4, "Uint64Var": 4, "Float64Var": 4, "DurationVar": 4,
	"Int": 3, "Int64": 3, "Uint": 3, "Uint64": 3, "Float64": 3, "Duration": 3,
}

// TestNumericFlagsAreRangeChecked: no product code (non-test file) of the module defines
// a numeric flag with the flag package's own definers (a call x.IntVar(p, "name", v,
// "usage"), x.Float64("name", v, "usage"), ...): every numeric flag goes through cli's,
// so every one is parsed, range-checked and refused the same way.
func TestNumericFlagsAreRangeChecked(t *testing.T) {
	root := "../.."
	var found []string
	productGoFiles(t, root, ".", nil, func(rel string, fset *token.FileSet, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			nargs, ok := flagMethods[sel.Sel.Name]
			if !ok || len(call.Args) != nargs {
				return true
			}
			// The flag's name is a string literal: the argument before the default.
			if lit, ok := call.Args[nargs-3].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				found = append(found, rel+":"+strconv.Itoa(fset.Position(call.Pos()).Line)+" "+sel.Sel.Name+"("+lit.Value+")")
			}
			return true
		})
	})
	for _, f := range found {
		t.Errorf("%s: define numeric flags with cli.IntVar, Int64Var, Uint64Var, FloatVar or DurationVar (range-checked)", f)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
