package pgstore

import (
	"strings"
	"testing"
)

func TestClaimOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps string // f: a claim found a record, i: a claim inserted one
		want  bool   // the next claim reads first
	}{
		{"a new store inserts first", "", false},
		{"first calls only", "iiiiiiii", false},
		{"one replay turns reads on", "iiiif", true},
		{"one replay is undone by foundWeight first calls", "f" + strings.Repeat("i", foundWeight), false},
		{"replays in half the claims keep reads on", strings.Repeat("fi", 50), true},
		{"a replay in three claims keeps them on after it", strings.Repeat("fii", 50) + "f", true},
		{"a replay in four claims turns them off", strings.Repeat("fiii", 50), false},
		{"a retry storm saturates", strings.Repeat("f", 1000) + strings.Repeat("i", maxScore-1), true},
		{"maxScore first calls end a storm", strings.Repeat("f", 1000) + strings.Repeat("i", maxScore), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o claimOrder
			for _, c := range tc.steps {
				if c == 'f' {
					o.found()
				} else {
					o.inserted()
				}
			}
			if got := o.readFirst(); got != tc.want {
				t.Errorf("after %q: readFirst = %v, want %v (score %d)", tc.steps, got, tc.want, o.score.Load())
			}
		})
	}
}
