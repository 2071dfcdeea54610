// Package tiny is the target of the mutants tool's own tests: Max is tested
// well, Abs only at one point.
package tiny

// Max returns the larger of a and b.
func Max(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// Abs returns the absolute value of x.
func Abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
