package runtime

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
)

type ctxKey int

const (
	scopeKey ctxKey = iota
	attemptKey
)

// WithScope returns a context whose idempotency keys belong to scope (a
// tenant or principal). Records of two scopes never meet, so one caller can
// never replay another's response. Set it where the caller is authenticated.
func WithScope(ctx context.Context, scope string) context.Context {
	if ctx == nil {
		panic("cannot create context from nil parent")
	}
	return &scopeCtx{Context: ctx, scope: scope}
}

// scopeCtx carries a scope. Its lookup returns the scopeCtx itself, not the
// string, so that neither setting nor reading a scope copies it into an
// interface.
type scopeCtx struct {
	context.Context
	scope string
}

func (c *scopeCtx) Value(key any) any {
	if key == any(scopeKey) {
		return c
	}
	return c.Context.Value(key)
}

func (c *scopeCtx) String() string { return "idem.WithScope(" + c.scope + ")" }

// ScopeFrom returns the scope set by [WithScope] (or [Call.Scope], in the
// effect's context), or "".
func ScopeFrom(ctx context.Context) string {
	if c, ok := ctx.Value(scopeKey).(*scopeCtx); ok {
		return c.scope
	}
	return ""
}

// Attempt describes the attempt an effect runs in; the runtime puts it in
// the effect's context.
type Attempt struct {
	// ID is the record's identity.
	ID Identity
	// FencingToken is the record's version when the effect started. It
	// increases with every takeover: a downstream that remembers the highest
	// token it saw can reject writes from a stale owner.
	FencingToken int64
	// DownstreamKey is derived from ID (see [DownstreamKey]) and the same
	// for every attempt; pass it as the idempotency key of downstream calls.
	DownstreamKey string
	// TakenOver reports that an earlier owner's lease expired before this
	// attempt, so the effect may already have happened once.
	TakenOver bool
}

// attempt is what the runtime puts in an effect's context; the downstream
// key is derived on first use only.
type attempt struct {
	id    Identity
	token int64
	// rt is the runtime whose call it is (nil for [WithAttempt]'s).
	rt   *Runtime
	once sync.Once
	// flags (attemptTakenOver, attemptLeave), after once: in its padding.
	flags atomic.Uint32
	dk    string
}

const (
	// attemptTakenOver: the claim took a record over (Attempt.TakenOver).
	attemptTakenOver = 1 << iota
	// attemptLeave is set by [ReleaseOnLeave]: a call that leaves without
	// its effect returning releases its claim.
	attemptLeave
)

func newAttempt(a *attempt, rt *Runtime, id Identity, token int64, takenOver bool) {
	*a = attempt{id: id, token: token, rt: rt}
	if takenOver {
		a.flags.Store(attemptTakenOver)
	}
}

func (a *attempt) downstreamKey() string {
	a.once.Do(func() { a.dk = DownstreamKey(a.id) })
	return a.dk
}

func withAttempt(ctx context.Context, rt *Runtime, id Identity, token int64, takenOver bool) context.Context {
	a := new(attempt)
	newAttempt(a, rt, id, token, takenOver)
	return context.WithValue(ctx, attemptKey, a)
}

// Running returns the identity of the call whose effect (or query) runs
// with ctx when that call's record is in rt's store: a call of rt's, or of
// another runtime on the same store (the same pointer). An adapter placed
// twice on the way to one handler (idemhttp's middleware around a mux and
// around a route, idemgrpc's interceptor chained twice) uses it to tell
// its own call, whose claim the outer placement holds, from a call on
// another store, in which the request is not claimed yet.
func (rt *Runtime) Running(ctx context.Context) (Identity, bool) {
	a, ok := ctx.Value(attemptKey).(*attempt)
	if !ok || a.rt == nil || !sameStore(a.rt, rt) {
		return Identity{}, false
	}
	return a.id, true
}

// ReleaseOnLeave marks the call whose effect runs with ctx as one whose
// request another placement of an adapter has claimed in another store
// (idemhttp's middleware, idemgrpc's interceptor, placed twice): that
// store's record is the request's, and this call's claim is to be
// released, never recorded. The adapter releases it when its effect
// returns; should the effect leave without returning (runtime.Goexit in
// the handler), the runtime releases it too instead of recording UNKNOWN,
// which no reconciler of this store would converge. It reports whether
// ctx is an effect's. For adapters.
func ReleaseOnLeave(ctx context.Context) bool {
	a, ok := ctx.Value(attemptKey).(*attempt)
	if ok {
		a.flags.Or(attemptLeave)
	}
	return ok
}

// sameStore reports whether a and b keep their records in one store: they
// are one runtime, or their stores are one pointer.
func sameStore(a, b *Runtime) bool {
	if a == b {
		return true
	}
	t := reflect.TypeOf(a.store)
	return t != nil && t.Kind() == reflect.Pointer && t == reflect.TypeOf(b.store) &&
		reflect.ValueOf(a.store).Pointer() == reflect.ValueOf(b.store).Pointer()
}

// AttemptFrom returns the attempt of the effect (or query) running with
// ctx.
//
// Two scopes are at hand there. Attempt.ID.Scope is the identity's scope,
// the record's name: the scope itself, or, where an adapter (idemhttp,
// idemgrpc) serves a scope over 255 bytes, a fixed-size digest of it.
// [ScopeFrom](ctx) is the scope the handler saw, whole, in the effect's
// context and in every query's: the inline query of a duplicate, the
// reconciler's, and one a resolve or idemctl triggers. Look a
// tenant-scoped effect up by ScopeFrom, never by the identity's scope.
func AttemptFrom(ctx context.Context) (Attempt, bool) {
	a, ok := ctx.Value(attemptKey).(*attempt)
	if !ok {
		return Attempt{}, false
	}
	return Attempt{ID: a.id, FencingToken: a.token, DownstreamKey: a.downstreamKey(), TakenOver: a.flags.Load()&attemptTakenOver != 0}, true
}

// FencingToken returns the fencing token of the effect running with ctx.
func FencingToken(ctx context.Context) (int64, bool) {
	a, ok := ctx.Value(attemptKey).(*attempt)
	if !ok {
		return 0, false
	}
	return a.token, true
}

// DownstreamKeyFrom returns the downstream key of the effect running with
// ctx.
func DownstreamKeyFrom(ctx context.Context) (string, bool) {
	a, ok := ctx.Value(attemptKey).(*attempt)
	if !ok {
		return "", false
	}
	return a.downstreamKey(), true
}
