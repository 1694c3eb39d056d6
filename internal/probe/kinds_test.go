package probe

import "testing"

// TestReplyKindsTable: every reply kind has a meaning and every kind the classifier
// gives is in the table.
func TestReplyKindsTable(t *testing.T) {
	if err := ReplyKinds.Check(); err != nil {
		t.Fatal(err)
	}
	for _, k := range Kinds {
		if !ReplyKinds.Has(k) {
			t.Errorf("kind %q is not in ReplyKinds", k)
		}
	}
}
