package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults of a [Runtime].
const (
	DefaultLease             = 30 * time.Second
	DefaultTTL               = 24 * time.Hour
	DefaultMaxWait           = 2 * time.Second
	DefaultCompletionTimeout = 10 * time.Second
	DefaultQueryTimeout      = 5 * time.Second
)

// ErrorPolicy says what becomes of a record when the effect returns an error
// that is neither a timeout nor marked with [Permanent] or [Retryable].
type ErrorPolicy int

const (
	// RecordUnknown records UNKNOWN: the effect may have happened, so it is
	// not run again until a query tells. The safe default.
	RecordUnknown ErrorPolicy = iota
	// RecordFailed records FAILED and replays the error to duplicates.
	// Choose it only when an unclassified error always means the effect did
	// not happen: an effect that went through and then returned a plain
	// error (a 500 after the charge) is recorded FAILED, and every
	// duplicate is told FAILED for an effect that happened.
	RecordFailed
	// ReleaseRecord deletes the record so that a retry runs the effect again.
	// Choose it only when every unclassified error happens before any effect.
	ReleaseRecord
)

func (p ErrorPolicy) String() string {
	switch p {
	case RecordUnknown:
		return "RecordUnknown"
	case RecordFailed:
		return "RecordFailed"
	case ReleaseRecord:
		return "ReleaseRecord"
	}
	return fmt.Sprintf("ErrorPolicy(%d)", int(p))
}

// Option configures a [Runtime].
type Option func(*config) error

type config struct {
	owner             string
	lease             time.Duration
	ttl               time.Duration
	maxWait           time.Duration
	completionTimeout time.Duration
	queryTimeout      time.Duration
	codec             Codec
	errorPolicy       ErrorPolicy
	recoverPanics     bool
	logger            *slog.Logger
	loggerSet         bool // by WithLogger: logs get the call's context
	observer          Observer
}

// WithOwner sets the owner id written into the records this runtime claims
// (idemctl shows it; the default is host/pid/random): 1 to 255 bytes of
// UTF-8 text without NUL. Runtimes may share
// one, in a process or across a restart under the same name: the tokens
// that identify a runtime's writes (see [TransitionParams].Token) carry a
// random part of each runtime's own, so no runtime's failed write is ever
// taken for another's applied one.
func WithOwner(owner string) Option {
	return func(c *config) error {
		if err := checkOwner(owner); err != nil {
			return fmt.Errorf("idem: %w", err)
		}
		c.owner = owner
		return nil
	}
}

// WithLease sets the default lease of a claim (default 30s). A running effect
// renews its lease every third of it.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("idem: lease must be at least 10ms, got %v", d)
		}
		c.lease = d
		return nil
	}
}

// minTTL is the shortest TTL accepted: a record kept for less cannot be
// replayed to any retry (it is as if there were no record).
const minTTL = 10 * time.Millisecond

// WithTTL sets how long finished records are kept for replay (default 24h,
// at least 10ms). A duplicate that arrives after a record's TTL is a new
// call: the effect runs again.
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < minTTL {
			return fmt.Errorf("idem: TTL must be at least %v, got %v", minTTL, d)
		}
		c.ttl = d
		return nil
	}
}

// WithMaxWait sets how long a duplicate waits for an in-flight call before it
// gets [ErrInProgress] (default 2s; 0 answers at once).
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("idem: max wait must not be negative, got %v", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithCompletionTimeout bounds the recording of an outcome after the effect
// returned (default 10s). Completion runs on a context the caller's
// cancellation cannot cancel.
func WithCompletionTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("idem: completion timeout must be positive, got %v", d)
		}
		c.completionTimeout = d
		return nil
	}
}

// WithQueryTimeout bounds an inline call of an operation's query function
// (default 5s).
func WithQueryTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("idem: query timeout must be positive, got %v", d)
		}
		c.queryTimeout = d
		return nil
	}
}

// WithCodec sets the codec of requests and responses (default [JSONCodec]).
func WithCodec(codec Codec) Option {
	return func(c *config) error {
		if codec == nil {
			return fmt.Errorf("idem: codec is nil")
		}
		c.codec = codec
		return nil
	}
}

// WithErrorPolicy sets what an unclassified effect error does to the record
// (default [RecordUnknown]). Timeouts and panics are always UNKNOWN.
func WithErrorPolicy(p ErrorPolicy) Option {
	return func(c *config) error {
		if p < RecordUnknown || p > ReleaseRecord {
			return fmt.Errorf("idem: unknown error policy %d", int(p))
		}
		c.errorPolicy = p
		return nil
	}
}

// WithRecoverPanics makes a panicking effect return a [*PanicError] (wrapping
// [ErrOutcomeUnknown]) instead of re-panicking after the record was moved to
// UNKNOWN.
func WithRecoverPanics(recover bool) Option {
	return func(c *config) error {
		c.recoverPanics = recover
		return nil
	}
}

// WithLogger sets the structured logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("idem: logger is nil")
		}
		c.logger, c.loggerSet = l, true
		return nil
	}
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return ownerOf(host, fmt.Sprintf("/%d/%s", os.Getpid(), hex.EncodeToString(b[:])))
}

// ownerOf is the default owner of a host name and a suffix of ASCII.
func ownerOf(host, suffix string) string {
	// An owner is UTF-8 text without NUL (checkOwner), cut to MaxKeyLen
	// at the front of the host name, at a rune's start.
	host = strings.ToValidUTF8(strings.ReplaceAll(host, "\x00", ""), "?")
	if keep := MaxKeyLen - len(suffix); len(host) > keep {
		host = host[len(host)-keep:]
		for host != "" && !utf8.RuneStart(host[0]) {
			host = host[1:]
		}
	}
	return host + suffix
}

// checkOwner checks an owner id: 1 to MaxKeyLen bytes of UTF-8 text
// without NUL. Every store writes it into records, PostgreSQL as text,
// which refuses NUL and bytes that are not UTF-8: such an owner failed
// every claim there, after New had accepted it (review r55).
func checkOwner(owner string) error {
	switch {
	case owner == "" || len(owner) > MaxKeyLen:
		return fmt.Errorf("owner must be 1 to %d bytes, got %d", MaxKeyLen, len(owner))
	case !utf8.ValidString(owner) || strings.ContainsRune(owner, 0):
		return fmt.Errorf("owner %q must be UTF-8 text without NUL", owner)
	}
	return nil
}
