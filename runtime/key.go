package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, scope or operation accepted, in bytes.
const MaxKeyLen = 255

// ValidateKey reports whether key is 1 to 255 bytes of visible ASCII
// (0x21 to 0x7E). The error wraps [ErrInvalidKey] and says what is wrong.
func ValidateKey(key string) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: byte %d of the key is %#02x; keys are visible ASCII (0x21-0x7e) only", ErrInvalidKey, i, c)
		}
	}
	return nil
}

func validateIdentity(id Identity) error {
	if err := ValidateKey(id.Key); err != nil {
		return err
	}
	if id.Operation == "" {
		return fmt.Errorf("%w: operation is empty", ErrInvalidKey)
	}
	if len(id.Operation) > MaxKeyLen {
		return fmt.Errorf("%w: operation is %d bytes, the limit is %d", ErrInvalidKey, len(id.Operation), MaxKeyLen)
	}
	if len(id.Scope) > MaxKeyLen {
		return fmt.Errorf("%w: scope is %d bytes, the limit is %d", ErrInvalidKey, len(id.Scope), MaxKeyLen)
	}
	for _, f := range [...]struct{ name, s string }{{"operation", id.Operation}, {"scope", id.Scope}} {
		ascii := true
		for i := 0; i < len(f.s); i++ {
			switch c := f.s[i]; {
			case c < 0x20 || c == 0x7f:
				return fmt.Errorf("%w: %s must not contain control bytes (found %#02x at byte %d)", ErrInvalidKey, f.name, c, i)
			case c >= utf8.RuneSelf:
				ascii = false
			}
		}
		if !ascii && !utf8.ValidString(f.s) {
			return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidKey, f.name)
		}
	}
	return nil
}

// Fingerprint returns the SHA-256 of data: the runtime's fingerprint of an
// encoded request.
func Fingerprint(data []byte) []byte {
	sum := sha256.Sum256(data)
	return sum[:]
}

// DownstreamKey derives a stable key from an identity, for passing the same
// identity to a downstream service (as its idempotency key) so that a retry
// after a takeover or a reconcile is deduplicated there too. It is 64 hex
// characters and the same for every attempt of the identity.
func DownstreamKey(id Identity) string {
	h := sha256.New()
	for _, s := range [...]string{id.Scope, id.Operation, id.Key} {
		var n [2]byte
		n[0], n[1] = byte(len(s)>>8), byte(len(s))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}
