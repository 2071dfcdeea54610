package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemkit/idem/runtime/internal/utf8text"
)

// Errors of [Resolve].
var (
	// ErrNotResolvable: the record cannot be resolved by hand now: it is
	// absent, final (SUCCESS or FAILED), held by a live lease (a worker or
	// a reconciler is on it), or it changed while it was being taken. The
	// error says which, and Resolve changed nothing.
	ErrNotResolvable = errors.New("idem: record not resolvable by hand")

	// ErrInvalidResolution: the [Resolution] itself is wrong (no reason, an
	// unknown target, a response for a failure, ...). Nothing was read.
	ErrInvalidResolution = errors.New("idem: invalid resolution")
)

// ResolveTo is what a person decides an unresolved record's outcome is.
type ResolveTo string

// The resolutions.
const (
	// ResolveSuccess: the effect happened. The record becomes SUCCESS with
	// the given response, replayed to every retry for the TTL; the effect
	// is never run again for this identity while the record lives.
	ResolveSuccess ResolveTo = "success"
	// ResolveFailed: the effect did not happen, or failed for good, and
	// retries must be told so. The record becomes FAILED with the given
	// failure, replayed as a [*FailedError].
	ResolveFailed ResolveTo = "failed"
	// ResolveReleased: the effect did not happen and may run again. The
	// record is deleted: the next retry claims the identity afresh and runs
	// the effect. If the effect did happen after all it happens twice,
	// unless the downstream deduplicates on [DownstreamKey].
	ResolveReleased ResolveTo = "released"
)

// ParseResolveTo parses "success", "failed" or "released" (any case).
func ParseResolveTo(s string) (ResolveTo, error) {
	switch to := ResolveTo(strings.ToLower(strings.TrimSpace(s))); to {
	case ResolveSuccess, ResolveFailed, ResolveReleased:
		return to, nil
	}
	return "", fmt.Errorf("%w: unknown resolution %q (want success, failed or released)", ErrInvalidResolution, s)
}

// MaxResolveReason is the longest reason accepted by [Resolve], in bytes.
const MaxResolveReason = 1024

// ResolveNotePrefix starts the Note of every record resolved by hand.
const ResolveNotePrefix = "resolved by hand: "

// resolveLease is how long Resolve holds a record between taking it and
// writing the outcome; if the resolving process dies in between, the record
// is free again after it.
const resolveLease = 30 * time.Second

// Resolution is a person's decision about one record whose outcome the
// runtime could not find (UNKNOWN, or PROCESSING whose worker died).
type Resolution struct {
	// ID is the record to resolve.
	ID Identity
	// To is the outcome decided.
	To ResolveTo
	// Response is the encoded response stored for [ResolveSuccess], in the
	// codec of the service (JSON by default): retries decode it into the
	// operation's response type. Required for success, refused otherwise.
	Response []byte
	// Failure is the permanent failure stored for [ResolveFailed], encoded
	// by [EncodeFailure] (its message and [Coder] code). Required for
	// failed, refused otherwise.
	Failure error
	// Reason says why, in words: required. It is stored in the record's
	// Note as "resolved by hand: <reason>" (as text: bytes that are not
	// UTF-8, and NUL, as U+FFFD) and logged.
	Reason string
	// Owner says who resolves (for example "idemctl:alice@host"): it is
	// the record's owner while Resolve holds it, and it is logged.
	// Required, at most 255 bytes of UTF-8 text without NUL.
	Owner string
	// TTL of the SUCCESS or FAILED record (0: [DefaultTTL]). Set it to the
	// operation's TTL.
	TTL time.Duration
	// Version, when not zero, refuses the resolution unless the record is
	// still at this version: resolve exactly the record that was looked at.
	Version int64
	// Logger, when not nil, gets one line per resolution or refusal: who,
	// what, why, the record as it was.
	Logger *slog.Logger
}

// ResolveResult is what [Resolve] did.
type ResolveResult struct {
	// Before is the record as Resolve found it.
	Before Record
	// State is the record's state now: SUCCESS, FAILED, or "" when it was
	// released (deleted).
	State State
	// Version is the record's version now (0 when released).
	Version int64
	// Note is the note stored with the record.
	Note string
}

// Resolve records a person's decision about an UNKNOWN record, or a
// PROCESSING record whose lease expired, by compare-and-set only: it never
// overwrites a record it has not taken.
//
// It reads the record and refuses, with an error wrapping
// [ErrNotResolvable], when it is absent (also [ErrNotFound]), final, or
// held by a live lease (also [ErrInProgress]; the error says by whom and
// until when). Otherwise it takes the record with [Store.Claim]
// (AcquireUnknown, the record's own fingerprint, IfVersion the version
// read), which succeeds only if the lease is still free and the record
// unchanged since the read, and moves it by compare-and-set from the taken
// (state, owner, version) to SUCCESS, to FAILED, or releases it. An UNKNOWN
// record that no one owns but whose lease is held off (the reconciler's
// backoff, or a [NoQueryPolicy] window) is moved by compare-and-set from
// the (state, owner "", version) read, since no one can renew it.
//
// Should the record change between the read and the take (a reconciler or
// a worker took it, it was resolved, or it vanished and the claim created a
// new one), Resolve refuses and leaves it as it found it (a record it
// created is released at once). A worker still running on a record
// resolved here gets [ErrLeaseLost] when it completes, and changes nothing.
func Resolve(ctx context.Context, store Store, r Resolution) (ResolveResult, error) {
	var res ResolveResult
	if store == nil {
		return res, fmt.Errorf("%w: store is nil", ErrInvalidResolution)
	}
	if err := r.validate(); err != nil {
		return res, err
	}
	rec, err := store.Get(ctx, r.ID)
	if errors.Is(err, ErrNotFound) {
		return res, r.refuse(ctx, nil, fmt.Errorf("%w: %s: no such record: %w", ErrNotResolvable, idText(r.ID), ErrNotFound))
	}
	if err != nil {
		return res, fmt.Errorf("idem: resolve %s: reading the record: %w", idText(r.ID), err)
	}
	res.Before = rec
	if r.Version != 0 && rec.Version != r.Version {
		return res, r.refuse(ctx, &rec, fmt.Errorf("%w: %s is at version %d, not %d: it changed since it was looked at",
			ErrNotResolvable, idText(r.ID), rec.Version, r.Version))
	}
	if err := resolvable(r.ID, &rec); err != nil {
		return res, r.refuse(ctx, &rec, err)
	}

	held := rec // the (state, owner, version) to move from
	if rec.State == StateUnknown && rec.Owner == "" && rec.LeaseLive() {
		// Held off, not held: no one can renew a lease without an owner,
		// and an acquisition changes the version, so the compare-and-set
		// from the version read is exact.
	} else {
		// The take names the version read: a worker that took the record
		// over, ran the effect and left it UNKNOWN in between leaves the
		// fields Resolve could check as they were, but not the version.
		cr, err := store.Claim(ctx, ClaimParams{
			ID: r.ID, Fingerprint: rec.Fingerprint, Request: rec.Request, Owner: r.Owner,
			Lease: resolveLease, AcquireUnknown: true, IfVersion: rec.Version,
		})
		if err != nil {
			return res, fmt.Errorf("idem: resolve %s: taking the record: %w", idText(r.ID), err)
		}
		if !cr.Claimed {
			cur := cr.Record
			err := resolvable(r.ID, &cur)
			if err == nil {
				err = fmt.Errorf("%w: %s: the record changed while it was being taken (now %s, version %d)", ErrNotResolvable, idText(r.ID), cur.State, cur.Version)
			}
			return res, r.refuse(ctx, &cur, err)
		}
		held = cr.Record
		if held.State == StateProcessing && held.Takeovers == 0 {
			// The record vanished between the read and the claim, and the
			// claim created a new one: let it go at once, untouched.
			rerr := store.Release(context.WithoutCancel(ctx), ReleaseParams{ID: r.ID, State: held.State, Owner: r.Owner, Version: held.Version})
			err := fmt.Errorf("%w: %s: the record vanished while it was being taken: %w", ErrNotResolvable, idText(r.ID), ErrNotFound)
			if rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
				err = errors.Join(err, fmt.Errorf("idem: resolve %s: releasing the record the claim created (it is free again when its %v lease expires): %w", idText(r.ID), resolveLease, rerr))
			}
			return res, r.refuse(ctx, &rec, err)
		}
		if !held.CreatedAt.Equal(rec.CreatedAt) {
			// Another life of the identity (released and claimed again in
			// between): not the record that was decided on.
			herr := handBack(context.WithoutCancel(ctx), store, r, &held)
			err := fmt.Errorf("%w: %s: the record was replaced while it was being taken (created %s, not %s)",
				ErrNotResolvable, idText(r.ID), held.CreatedAt.UTC().Format(time.RFC3339Nano), rec.CreatedAt.UTC().Format(time.RFC3339Nano))
			return res, r.refuse(ctx, &held, errors.Join(err, herr))
		}
	}

	// The reason as text: bytes that are not UTF-8, and NUL, as U+FFFD
	// on every store (PostgreSQL stores notes so; the result's Note is
	// the note stored: review r55).
	note := ResolveNotePrefix + utf8text.Clean(r.Reason)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCompletionTimeout)
	defer cancel()
	token := r.Owner + "#" + randomHex(8)
	var v int64
	if r.To == ResolveReleased {
		err = retryWrite(wctx, releaseApplied(store, r.ID, held.CreatedAt), func(ctx context.Context) error {
			return store.Release(ctx, ReleaseParams{ID: r.ID, State: held.State, Owner: held.Owner, Version: held.Version})
		}, nil)
	} else {
		tp := TransitionParams{
			ID: r.ID, From: held.State, Owner: held.Owner, Version: held.Version,
			TTL: r.TTL, Note: note, Token: token,
		}
		if tp.TTL <= 0 {
			tp.TTL = DefaultTTL
		}
		if r.To == ResolveSuccess {
			tp.To, tp.Response = StateSuccess, bytes.Clone(r.Response) // the caller keeps its slice
		} else {
			tp.To, tp.Response = StateFailed, EncodeFailure(r.Failure)
		}
		err = retryWrite(wctx, nil, func(ctx context.Context) error {
			var err error
			v, err = fitTransition(ctx, store, &tp, nil) // the size rule: recorded, shortened if need be
			return err
		}, nil)
		res.State = tp.To
		note = tp.Note
	}
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			return ResolveResult{Before: rec}, r.refuse(ctx, &held, fmt.Errorf("%w: %s: the record changed before the outcome was written: %w", ErrNotResolvable, idText(r.ID), err))
		}
		if held.Owner == r.Owner {
			err = errors.Join(err, handBack(wctx, store, r, &held))
		}
		return ResolveResult{Before: rec}, fmt.Errorf("idem: resolve %s: writing %s: %w", idText(r.ID), r.To, err)
	}
	res.Version, res.Note = v, note
	if r.Logger != nil {
		msg := "idem: record resolved by hand"
		if r.To == ResolveReleased {
			msg = "idem: record released by hand; it is deleted, and this line is all that remains of it"
		}
		attrs := append(r.logAttrs(&rec), slog.String("to", string(r.To)))
		if r.To != ResolveReleased {
			attrs = append(attrs, slog.Int64("new_version", v))
		}
		if r.To == ResolveFailed {
			attrs = append(attrs, slog.Any("failure", json.RawMessage(EncodeFailure(r.Failure))))
		}
		if r.To == ResolveSuccess {
			attrs = append(attrs, jsonOrBytes("response", r.Response))
		}
		r.Logger.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
	}
	return res, nil
}

func (r *Resolution) validate() error {
	if err := validateIdentity(r.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidResolution, err)
	}
	switch {
	case strings.TrimSpace(r.Reason) == "":
		return fmt.Errorf("%w: a reason is required", ErrInvalidResolution)
	case len(r.Reason) > MaxResolveReason:
		return fmt.Errorf("%w: the reason is %d bytes, the limit is %d", ErrInvalidResolution, len(r.Reason), MaxResolveReason)
	case checkOwner(r.Owner) != nil:
		return fmt.Errorf("%w: owner (who resolves): %w", ErrInvalidResolution, checkOwner(r.Owner))
	case r.TTL < 0:
		return fmt.Errorf("%w: TTL must not be negative, got %v", ErrInvalidResolution, r.TTL)
	}
	switch r.To {
	case ResolveSuccess:
		if len(r.Response) == 0 {
			return fmt.Errorf("%w: success needs the response to replay", ErrInvalidResolution)
		}
		if r.Failure != nil {
			return fmt.Errorf("%w: success takes no failure", ErrInvalidResolution)
		}
	case ResolveFailed:
		if r.Failure == nil {
			return fmt.Errorf("%w: failed needs the failure to replay", ErrInvalidResolution)
		}
		if r.Response != nil {
			return fmt.Errorf("%w: failed takes no response (the failure is the response)", ErrInvalidResolution)
		}
	case ResolveReleased:
		if r.Response != nil || r.Failure != nil {
			return fmt.Errorf("%w: released takes neither a response nor a failure", ErrInvalidResolution)
		}
	default:
		return fmt.Errorf("%w: unknown resolution %q (want success, failed or released)", ErrInvalidResolution, r.To)
	}
	return nil
}

// resolvable returns why rec cannot be resolved by hand, or nil.
func resolvable(id Identity, rec *Record) error {
	switch {
	case rec.State.Final():
		return fmt.Errorf("%w: %s is %s already (version %d): final records are never changed by hand",
			ErrNotResolvable, idText(id), rec.State, rec.Version)
	case rec.State != StateUnknown && rec.State != StateProcessing:
		return fmt.Errorf("%w: %s is in unknown state %q", ErrNotResolvable, idText(id), rec.State)
	case rec.LeaseLive() && (rec.Owner != "" || rec.State == StateProcessing):
		who := "a worker"
		if rec.State == StateUnknown {
			who = "a reconciler (or a worker converging it)"
		}
		return fmt.Errorf("%w: %s is %s and held by %s (owner %q, version %d) until %s (%v more): %w; try again after the lease",
			ErrNotResolvable, idText(id), rec.State, who, rec.Owner, rec.Version,
			rec.LeaseExpiresAt.UTC().Format(time.RFC3339Nano), rec.LeaseExpiresAt.Sub(rec.StoreNow).Round(time.Millisecond), ErrInProgress)
	}
	return nil
}

// handBack gives up a record Resolve took but did not resolve, leaving it as
// it was: UNKNOWN with a free lease, or PROCESSING with a lease that expires
// at once (so a duplicate or a reconciler takes it over).
func handBack(ctx context.Context, store Store, r Resolution, held *Record) error {
	tp := TransitionParams{ID: r.ID, From: held.State, Owner: r.Owner, Version: held.Version, To: held.State,
		Note: held.Note, Token: r.Owner + "#" + randomHex(8)}
	if held.State == StateProcessing {
		tp.Lease = time.Millisecond
	}
	if _, err := fitTransition(ctx, store, &tp, nil); err != nil && !errors.Is(err, ErrLeaseLost) {
		return fmt.Errorf("idem: resolve %s: handing the record back (it is free again when its %v lease expires): %w", idText(r.ID), resolveLease, err)
	}
	return nil
}

func (r *Resolution) refuse(ctx context.Context, rec *Record, err error) error {
	if r.Logger != nil {
		attrs := append(r.logAttrs(rec), slog.String("to", string(r.To)), slog.String("refused", err.Error()))
		r.Logger.LogAttrs(ctx, slog.LevelInfo, "idem: resolution refused; nothing changed", attrs...)
	}
	return err
}

// logAttrs describe who resolves what, why, and the record as it was.
func (r *Resolution) logAttrs(rec *Record) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("who", r.Owner), slog.String("reason", r.Reason),
		slog.String("scope", r.ID.Scope), slog.String("operation", r.ID.Operation), slog.String("key", r.ID.Key),
	}
	if rec == nil {
		return attrs
	}
	return append(attrs, slog.Group("record",
		slog.String("state", string(rec.State)), slog.Int64("version", rec.Version), slog.String("owner", rec.Owner),
		slog.Int("attempts", int(rec.Attempts)), slog.Int("takeovers", int(rec.Takeovers)),
		slog.Time("created_at", rec.CreatedAt), slog.Time("updated_at", rec.UpdatedAt),
		slog.String("fingerprint", hex.EncodeToString(rec.Fingerprint)),
		jsonOrBytes("request", rec.Request), slog.String("note", rec.Note),
	))
}

// jsonOrBytes logs b as JSON when it is valid JSON, else as base64.
func jsonOrBytes(key string, b []byte) slog.Attr {
	if json.Valid(b) {
		return slog.Any(key, json.RawMessage(b))
	}
	return slog.Any(key+"_base64", b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

// DecodeFailure decodes a FAILED record's Response, as [EncodeFailure]
// wrote it, into the [*FailedError] replayed to duplicates.
func DecodeFailure(id Identity, data []byte) (*FailedError, error) {
	f, err := parseFailure(data)
	if err != nil {
		return nil, fmt.Errorf("idem: %s %q: decoding stored failure: %w", id.Operation, id.Key, err)
	}
	return &FailedError{Operation: id.Operation, Key: id.Key, Code: f.Code, Message: f.Message, Detail: f.Detail}, nil
}

// idText formats an identity for messages.
func idText(id Identity) string {
	return fmt.Sprintf("%s %q (scope %q)", id.Operation, id.Key, id.Scope)
}
