package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Attempts of a run. A run's natural key dedupes its rows, so running it again measures
// only what it lacks. To measure it all again (--rerun), the new attempt is a run of its
// own under the label LABEL-rN, N = 2, 3, ...: the first attempt's rows stay as they
// are, the new one's rows have keys of their own, and no row is ever written twice.

// AttemptLabel returns the label of a new attempt of a run labelled label, given the
// labels its other attempts already use (taken; the run's other key parts equal): label
// itself when it is not taken, else label-rN with the first N >= 2 not taken.
func AttemptLabel(label string, taken []string) string {
	used := map[string]bool{}
	for _, t := range taken {
		used[t] = true
	}
	if !used[label] {
		return label
	}
	n := 2
	for ; used[label+"-r"+strconv.Itoa(n)]; n++ {
	}
	return label + "-r" + strconv.Itoa(n)
}

// AttemptLabels are the labels of label's attempts among table's runs that match the
// other key parts (where: "col = $2 AND col2 = $3" with args; $1 is the label).
func (s *Store) AttemptLabels(ctx context.Context, table, where string, label string, args ...any) ([]string, error) {
	q := `SELECT label FROM ` + table + ` WHERE (label = $1 OR starts_with(label, $1 || '-r')) AND ` + where
	rows, err := s.Pool.Query(ctx, q, append([]any{label}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s: %w", label, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, err
		}
		if l == label || isAttempt(l, label) {
			out = append(out, l)
		}
	}
	return out, rows.Err()
}

// isAttempt says whether l is label-rN.
func isAttempt(l, label string) bool {
	n, ok := strings.CutPrefix(l, label+"-r")
	if !ok {
		return false
	}
	_, err := strconv.Atoi(n)
	return err == nil
}
