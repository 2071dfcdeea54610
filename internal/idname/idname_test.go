package idname

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFit(t *testing.T) {
	long := strings.Repeat("spiffe://example.org/ns/payments/sa/", 8)
	for _, c := range []struct {
		in   string
		same bool
	}{
		{"tenant-1", true},
		{"", true},
		{strings.Repeat("a", 255), true},
		{strings.Repeat("a", 256), false},
		{long, false},
		{"bad\xffutf8", false},
		{"tab\there", false},
	} {
		got := Fit(c.in, 255)
		if (got == c.in) != c.same || len(got) > 255 || !utf8.ValidString(got) || hasControl(got) {
			t.Errorf("Fit(%q) = %q", c.in, got)
		}
	}
	if Fit(long+"a", 255) == Fit(long+"b", 255) {
		t.Error("two long names share a derived name")
	}
}
