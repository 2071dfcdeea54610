// Package idname makes names the adapters derive from requests (scopes,
// operations) fit the runtime's identity rules: at most a given number of
// bytes of UTF-8 without control bytes. A name that does not fit is replaced
// by a fixed-size one derived from it, so that a long or odd name is the
// server's business, never the client's error.
package idname

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"github.com/idemkit/idem/runtime"
)

// Marker separates a derived name's prefix from its digest: a derived name
// is its first bytes, Marker and 64 hex digits.
const Marker = "…#sha256:"

// Fit returns s when it is at most n bytes of valid UTF-8 without control
// bytes and without [Marker], and otherwise a fixed-size name derived from
// it: its first 64 bytes (control bytes and invalid UTF-8 removed), Marker
// and its SHA-256 in hex, at most 139 bytes. Fit is one-to-one (short of a
// SHA-256 collision): a kept name never contains Marker and a derived one
// always does, so a name that is another's derived name, sent as it is, is
// derived in turn rather than kept; and two derived names differ in their
// digests.
func Fit(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) && !hasControl(s) && !strings.Contains(s, Marker) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	prefix := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s[:min(len(s), 64)], ""))
	return prefix + Marker + hex.EncodeToString(sum[:])
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// StoreScope returns how an adapter stores scope with a request for its
// query: as text when it is valid UTF-8, else as bytes (JSON would replace
// each invalid byte by U+FFFD, and the query would look in another
// tenant).
func StoreScope(scope string) (text string, raw []byte) {
	if utf8.ValidString(scope) {
		return scope, nil
	}
	return "", []byte(scope)
}

// StoredScope is the scope StoreScope stored as text or raw.
func StoredScope(text string, raw []byte) string {
	if raw != nil {
		return string(raw)
	}
	return text
}

// QueryScope returns the scope an adapter's query runs in: stored, the
// scope stored with the request when the identity's is a digest of it,
// else the identity's scope (the attempt's in ctx), which is then the
// scope itself.
func QueryScope(ctx context.Context, stored string) string {
	if stored != "" {
		return stored
	}
	if a, ok := runtime.AttemptFrom(ctx); ok {
		return a.ID.Scope
	}
	return runtime.ScopeFrom(ctx)
}
