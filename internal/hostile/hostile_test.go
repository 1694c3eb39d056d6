package hostile_test

import (
	"testing"

	"github.com/doqscan/doqscan/internal/hostile"
)

func TestBehavioursTable(t *testing.T) {
	if err := hostile.Behaviours.Check(); err != nil {
		t.Fatal(err)
	}
	if hostile.Behaviours.Has(hostile.None) {
		t.Error("None is in the table")
	}
	dup := append(hostile.Table{}, hostile.Behaviours...)
	dup = append(dup, hostile.Behaviours[0])
	if dup.Check() == nil {
		t.Error("Check accepts a behaviour listed twice")
	}
}

func TestSubsetCheck(t *testing.T) {
	all := hostile.Subset{Implements: hostile.Behaviours.Values()}
	if err := all.Check(); err != nil {
		t.Errorf("the whole table: %v", err)
	}
	rest := map[hostile.Behaviour]string{}
	for _, b := range hostile.Behaviours.Values()[1:] {
		rest[b] = "a reason"
	}
	first := hostile.Behaviours[0].Behaviour
	for name, s := range map[string]hostile.Subset{
		"empty":          {},
		"no reason":      {Implements: []hostile.Behaviour{first}, Omits: map[hostile.Behaviour]string{hostile.Behaviours[1].Behaviour: ""}},
		"not in table":   {Implements: append(hostile.Behaviours.Values(), "nice")},
		"twice":          {Implements: append(hostile.Behaviours.Values(), first)},
		"both":           {Implements: hostile.Behaviours.Values(), Omits: map[hostile.Behaviour]string{first: "a reason"}},
		"omits unlisted": {Implements: []hostile.Behaviour{first}, Omits: map[hostile.Behaviour]string{"nice": "a reason"}},
	} {
		if s.Check() == nil {
			t.Errorf("%s: Check passes", name)
		}
	}
	if err := (hostile.Subset{Implements: []hostile.Behaviour{first}, Omits: rest}).Check(); err != nil {
		t.Errorf("one implemented, the rest omitted with reasons: %v", err)
	}
}
