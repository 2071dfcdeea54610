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

// TestReason: the code action's placeholder, alone or followed by more
// text, is no reason; anything else is.
func TestReason(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{Placeholder, ""},
		{"  " + Placeholder + " ", ""},
		{Placeholder + " later", ""},
		{"the gateway dedupes on id", "the gateway dedupes on id"},
		{"TODO: check with payments", "TODO: check with payments"},
	} {
		if got := Reason(c.text); got != c.want {
			t.Errorf("Reason(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}
