package utf8text

import "testing"

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"":              "",
		"plain":         "plain",
		"café":          "café",
		"caf\xe9":       "caf\uFFFD",
		"a\x00b":        "a\uFFFDb",
		"\xff\xfe\x00x": "\uFFFD\uFFFDx",
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}
