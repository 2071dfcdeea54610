package runtime

import (
	"strings"
	"testing"
)

// TestDefaultOwnerIsText: the default owner is valid for checkOwner
// whatever the host name (bytes that are not UTF-8, NUL, a name longer
// than the limit made of multi-byte runes, cut at a rune's start).
func TestDefaultOwnerIsText(t *testing.T) {
	const suffix = "/4242/0123456789ab"
	for _, host := range []string{
		"host-1",
		"caf\xe9",
		"a\x00b",
		strings.Repeat("é", 200),       // 400 bytes: cut
		"x" + strings.Repeat("日本", 60), // 361 bytes: cut mid-rune without the check
		"",
	} {
		got := ownerOf(host, suffix)
		if err := checkOwner(got); err != nil && host != "" {
			t.Errorf("ownerOf(%q): %q: %v", host, got, err)
		}
		if !strings.HasSuffix(got, suffix) {
			t.Errorf("ownerOf(%q) = %q: lost the suffix", host, got)
		}
	}
	if err := checkOwner(defaultOwner()); err != nil {
		t.Errorf("defaultOwner(): %v", err)
	}
}
