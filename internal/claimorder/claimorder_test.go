package claimorder

import (
	"strings"
	"testing"
)

func TestGuess(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps string // f: a claim found a record, c: a claim created one
		fix   int
		want  bool // the next claim reads first
	}{
		{name: "a new store claims first", steps: "", want: false},
		{name: "first calls only", steps: "cccccccc", want: false},
		{name: "one replay turns reads on", steps: "ccccf", want: true},
		{name: "one replay is undone by FoundWeight first calls", steps: "f" + strings.Repeat("c", FoundWeight), want: false},
		{name: "replays in half the claims keep reads on", steps: strings.Repeat("fc", 50), want: true},
		{name: "a replay in three claims keeps them on after it", steps: strings.Repeat("fcc", 50) + "f", want: true},
		{name: "a replay in four claims turns them off", steps: strings.Repeat("fccc", 50), want: false},
		{name: "a retry storm saturates", steps: strings.Repeat("f", 1000) + strings.Repeat("c", MaxScore-1), want: true},
		{name: "MaxScore first calls end a storm", steps: strings.Repeat("f", 1000) + strings.Repeat("c", MaxScore), want: false},
		{name: "fixed to read first", steps: "cccc", fix: 1, want: true},
		{name: "fixed to claim first", steps: "ffff", fix: -5, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g Guess
			g.Fix(tc.fix)
			for _, c := range tc.steps {
				if c == 'f' {
					g.Found()
				} else {
					g.Created()
				}
			}
			if got := g.ReadFirst(); got != tc.want {
				t.Errorf("after %q (fixed %d): ReadFirst = %v, want %v (score %d)", tc.steps, tc.fix, got, tc.want, g.Score())
			}
		})
	}
}
