package tiny

import (
	"os"
	"testing"
)

func TestMax(t *testing.T) {
	for _, c := range []struct{ a, b, want int }{{1, 2, 2}, {2, 1, 2}, {-1, -1, -1}} {
		if got := Max(c.a, c.b); got != c.want {
			t.Errorf("Max(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestAbs(t *testing.T) {
	if got := Abs(3); got != 3 {
		t.Errorf("Abs(3) = %d, want 3", got)
	}
}

// TestFails fails when MUTANTS_TINY_FAIL is set: a test that fails with or
// without a mutant.
func TestFails(t *testing.T) {
	if os.Getenv("MUTANTS_TINY_FAIL") != "" {
		t.Error("MUTANTS_TINY_FAIL is set")
	}
}
