package directive

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"txrpc", "txrpc", 0},
		{"txrcp", "txrpc", 2},
		{"tokenordr", "tokenorder", 1},
		{"timeoutfial", "timeoutfail", 2},
		{"timeoutfail", "txrpc", 10},
		{"", "txrpc", 5},
	} {
		if got := distance(c.a, c.b); got != c.want {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
