// Package outcome is the one mechanism behind every classified outcome in doqscan, in
// the manner of zgrab2's status.go: each layer declares its statuses once, as a Table
// that gives every value its one-line meaning, and an error can carry its class
// (Error[S]) from where it is made to where it is stored; a layer's Classify reads that
// class with errors.As (TryGet) before it looks at the error's type. Nothing here (nor
// in any Classify) matches error text.
//
// The tables, one per layer (README.md "Outcomes" lists them):
//
//	scan reply    probe.Kinds          scan_replies.reply_kind
//	verification  verify.Outcomes      verification_results.outcome
//	measurement   measure.Statuses     measurements.status
//	RTT sample    rtt.Statuses         rtt_samples.status
//	run           store.RunStatuses    scans, scan_runs, verification_runs, campaigns, job_runs
package outcome

import (
	"errors"
	"fmt"
	"slices"
)

// Entry is one status of a table with its meaning.
type Entry[S ~string] struct {
	Status  S
	Meaning string // one line: when a target, exchange or run gets this status
}

// Table is the explicit, ordered list of a layer's statuses (the order reports print).
type Table[S ~string] []Entry[S]

// Values returns the statuses in table order.
func (t Table[S]) Values() []S {
	out := make([]S, len(t))
	for i, e := range t {
		out[i] = e.Status
	}
	return out
}

// Has says whether s is a status of the table.
func (t Table[S]) Has(s S) bool {
	return slices.ContainsFunc(t, func(e Entry[S]) bool { return e.Status == s })
}

// Meaning returns the meaning of s, or "" if s is not in the table.
func (t Table[S]) Meaning(s S) string {
	for _, e := range t {
		if e.Status == s {
			return e.Meaning
		}
	}
	return ""
}

// Check returns an error unless every status is non-empty, unique and has a meaning.
func (t Table[S]) Check() error {
	seen := map[S]bool{}
	for i, e := range t {
		switch {
		case e.Status == "":
			return fmt.Errorf("entry %d: empty status", i)
		case seen[e.Status]:
			return fmt.Errorf("status %q listed twice", e.Status)
		case e.Meaning == "":
			return fmt.Errorf("status %q has no meaning", e.Status)
		}
		seen[e.Status] = true
	}
	return nil
}

// Error is an error that carries its class, attached where the error is made (zgrab2's
// ScanError). Its text is the wrapped error's; errors.Is/As see through it.
type Error[S ~string] struct {
	Status S
	Err    error
}

// Errorf returns an *Error[S] of status s with a formatted error (%w wraps).
func Errorf[S ~string](s S, format string, a ...any) error {
	return &Error[S]{Status: s, Err: fmt.Errorf(format, a...)}
}

// Wrap returns err with status s attached (nil stays nil).
func Wrap[S ~string](s S, err error) error {
	if err == nil {
		return nil
	}
	return &Error[S]{Status: s, Err: err}
}

func (e *Error[S]) Error() string {
	if e.Err == nil {
		return string(e.Status)
	}
	return e.Err.Error()
}

func (e *Error[S]) Unwrap() error { return e.Err }

// TryGet returns the status an *Error[S] in err's chain carries (zgrab2's
// TryGetScanStatus), or false if there is none.
func TryGet[S ~string](err error) (S, bool) {
	if e, ok := errors.AsType[*Error[S]](err); ok {
		return e.Status, true
	}
	var zero S
	return zero, false
}
