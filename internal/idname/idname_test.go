package idname

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFit(t *testing.T) {
	long := strings.Repeat("spiffe://example.org/ns/payments/sa/", 8)
	for _, c := range []struct {
		name string
		in   string
		same bool
	}{
		{"short", "tenant-1", true},
		{"empty", "", true},
		{"at the limit", strings.Repeat("a", 255), true},
		{"over the limit", strings.Repeat("a", 256), false},
		{"long", long, false},
		{"invalid UTF-8", "bad\xffutf8", false},
		{"control byte", "tab\there", false},
		{"a derived name", Fit(long, 255), false},
		{"the marker", "tenant…#sha256:", false},
		{"the marker inside", "a…#sha256:b", false},
		{"the ellipsis alone", "tenant…", true},
		{"a hash sign", "tenant#sha256", true},
	} {
		got := Fit(c.in, 255)
		if (got == c.in) != c.same || len(got) > 255 || !utf8.ValidString(got) || hasControl(got) {
			t.Errorf("%s: Fit(%q) = %q", c.name, c.in, got)
		}
	}
}

// TestFitInjective: two different names never share a fitted one, whether
// each is kept or derived; in particular the derived name of a long name,
// sent as a name of its own, is not kept (the review's forged scope).
func TestFitInjective(t *testing.T) {
	long := strings.Repeat("spiffe://example.org/ns/payments/sa/", 8)
	derived := Fit(long, 255)
	names := []string{
		long, long + "a", long + "b", derived, Fit(derived, 255),
		"tenant-1", strings.Repeat("a", 255), strings.Repeat("a", 256),
		"bad\xffutf8", "bad\xfeutf8", "badutf8", "tab\there", "tabhere",
		long[:64] + "…#sha256:" + strings.Repeat("0", 64),
	}
	seen := map[string]string{}
	for _, n := range names {
		got := Fit(n, 255)
		if prev, ok := seen[got]; ok && prev != n {
			t.Errorf("Fit(%.70q) = Fit(%.70q) = %.70q", n, prev, got)
		}
		seen[got] = n
	}
}
