// Package utf8text makes a string valid text for every store: UTF-8
// without NUL, which a PostgreSQL text column requires.
package utf8text

import (
	"strings"
	"unicode/utf8"
)

// Clean returns s with each run of bytes that are not UTF-8, and each NUL,
// replaced by U+FFFD; s itself when it has none.
func Clean(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
