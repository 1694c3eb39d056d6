package store

import "testing"

// TestAttemptLabel: the first attempt keeps its label; later ones are LABEL-r2, -r3, ...,
// the first number no attempt uses (labels that merely start alike do not count).
func TestAttemptLabel(t *testing.T) {
	for _, c := range []struct {
		label string
		taken []string
		want  string
	}{
		{"hourly", nil, "hourly"},
		{"hourly", []string{"hourly-r2"}, "hourly"},
		{"hourly", []string{"hourly"}, "hourly-r2"},
		{"hourly", []string{"hourly", "hourly-r2", "hourly-r3"}, "hourly-r4"},
		{"hourly", []string{"hourly", "hourly-r3"}, "hourly-r2"},
	} {
		if got := AttemptLabel(c.label, c.taken); got != c.want {
			t.Errorf("AttemptLabel(%q, %q) = %q, want %q", c.label, c.taken, got, c.want)
		}
	}
	if !isAttempt("hourly-r12", "hourly") || isAttempt("hourly-rx", "hourly") || isAttempt("hourly2-r2", "hourly") {
		t.Error("isAttempt")
	}
}
