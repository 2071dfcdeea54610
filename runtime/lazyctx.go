package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The contexts of a call's hot path are made lazily: each behaves exactly
// as the standard context it stands for, but makes that context (its
// cancelCtx, its timer) only when something needs it: a Done channel to
// wait on, a value to look up through it, a cancellation. An effect or a
// store write that only checks Err costs no allocation and no timer.

// effectCtx is the context an effect (or an inline query) runs with: the
// caller's context carrying the [Attempt], cancellable with a cause (the
// lease lost), and cancelled when the call ends. It stands for
// context.WithCancelCause(withAttempt(parent, ...)) (with [WithScope] first
// when the call sets [Call.Scope]).
type effectCtx struct {
	parent context.Context
	a      attempt
	// scope, when its scope is not "", is the call's [Call.Scope].
	scope scopeCtx

	mu       sync.Mutex
	ready    atomic.Bool // inner is made
	released atomic.Bool // the call ended: cancelled with no cause
	inner    context.Context
	cancel   context.CancelCauseFunc
	// stopped is the cause the runtime stopped the effect with
	// ([effectCtx.cancelCause]: the lease rule), whatever the context's
	// own cause (the caller's, when its context ended first, or one it
	// carried in: an outer call's lost lease). A pointer: [running] keeps
	// to its size class.
	stopped *error
}

func (c *effectCtx) init(parent context.Context, rt *Runtime, id Identity, token int64, takenOver bool, scope string) {
	c.parent, c.stopped = parent, nil
	newAttempt(&c.a, rt, id, token, takenOver)
	// The call's scope is answered by this context itself, whatever the
	// parent carries: looking the parent's up would call code of the
	// caller's (its Value) between the lease's last check and the effect.
	c.scope = scopeCtx{scope: scope}
}

// materialize makes the cancelCtx this context stands for.
//
// Making it calls code of the caller's (the parent's Done and Value, which
// may block or call runtime.Goexit), so it is made outside the lock that
// [effectCtx.cancelCause] takes: the lease rule's stop never waits on it. A
// context made meanwhile by the stop (or by another goroutine) wins; this
// one is dropped.
func (c *effectCtx) materialize() context.Context {
	if c.ready.Load() {
		return c.inner
	}
	var inner context.Context
	var cancel context.CancelCauseFunc
	if c.released.Load() {
		// Made after the call ended (a goroutine the effect left behind):
		// it ended with the call, Canceled, whatever the parent did since.
		inner, cancel = context.WithCancelCause(context.WithoutCancel(c.parent))
		cancel(nil)
	} else {
		inner, cancel = context.WithCancelCause(c.parent)
	}
	c.mu.Lock()
	if c.ready.Load() {
		c.mu.Unlock()
		cancel(nil)
		return c.inner
	}
	c.inner, c.cancel = inner, cancel
	c.ready.Store(true)
	released := c.released.Load()
	c.mu.Unlock()
	if released {
		cancel(nil)
	}
	return inner
}

// cancelCause cancels the context with cause, as a CancelCauseFunc does.
//
// It runs on the renewals' goroutine (the lease rule stopping the effect),
// so it calls no code of the caller's before the context is cancelled: a
// context not made yet is made detached from the parent's cancellation
// (context.WithoutCancel, whose Done is nil: the parent's Done, which the
// usual making calls and which may block or call runtime.Goexit, is never
// called), as it is cancelled at once. Once cancelled, its Err and cause
// never change, so the parent's own cancellation has nothing left to do.
func (c *effectCtx) cancelCause(cause error) {
	c.mu.Lock()
	if !c.ready.Load() {
		c.inner, c.cancel = context.WithCancelCause(context.WithoutCancel(c.parent))
		if c.released.Load() {
			c.cancel(nil)
		}
		c.ready.Store(true)
	}
	if c.stopped == nil {
		c.stopped = &cause
	}
	cancel := c.cancel
	c.mu.Unlock()
	cancel(cause)
}

// stopCause is the cause the runtime stopped the effect with (nil when it
// did not): what the runtime judges its own lease by, never the context's
// cause, which a caller's context can carry in.
func (c *effectCtx) stopCause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped == nil {
		return nil
	}
	return *c.stopped
}

// release ends the context, as the deferred cancel(nil) of a
// WithCancelCause does.
//
// A parent that ended during the call ended this context first, as it
// would have ended a standard child when it did: a context not made yet is
// made from it now, so that its error and cause, read later (by a
// goroutine the effect left behind), are the parent's (a deadline's
// DeadlineExceeded), not the call's end. It runs on the call's goroutine,
// never on the renewals'.
func (c *effectCtx) release() {
	if !c.ready.Load() && c.parent.Err() != nil {
		c.materialize()
	}
	c.mu.Lock()
	c.released.Store(true)
	ready, cancel := c.ready.Load(), c.cancel
	c.mu.Unlock()
	if ready {
		cancel(nil) // may call the parent's code (its Done, its Value), outside the lock
	}
}

func (c *effectCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

func (c *effectCtx) Done() <-chan struct{} { return c.materialize().Done() }

func (c *effectCtx) Err() error {
	switch {
	case c.ready.Load():
		return c.inner.Err()
	case c.released.Load():
		return context.Canceled
	}
	if c.parent.Err() != nil {
		// The parent ended: the context is made now, on the effect's
		// goroutine, so that its error and cause, once seen, never change
		// (a stop by the lease rule afterwards finds it cancelled).
		return c.materialize().Err()
	}
	return nil
}

func (c *effectCtx) Value(key any) any {
	switch {
	case key == any(attemptKey):
		return &c.a
	case c.scope.scope != "" && key == any(scopeKey):
		return &c.scope
	}
	// Until it is made or cancelled, the cancelCtx would answer every
	// lookup (its cause included) from the parent.
	if c.ready.Load() || c.released.Load() {
		return c.materialize().Value(key)
	}
	return c.parent.Value(key)
}

func (c *effectCtx) String() string { return "idem.effectContext" }

// completionCtx is the context a completion writes with: the caller's
// values, not its cancellation, and a deadline. It stands for
// context.WithDeadline(context.WithoutCancel(parent), deadline); until
// something waits on it or looks a value up, its Err reads the clock.
type completionCtx struct {
	parent   context.Context
	deadline time.Time

	mu       sync.Mutex
	ready    atomic.Bool
	released atomic.Bool
	inner    context.Context
	cancel   context.CancelFunc
}

func (c *completionCtx) materialize() context.Context {
	if c.ready.Load() {
		return c.inner
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready.Load() {
		c.inner, c.cancel = context.WithDeadline(context.WithoutCancel(c.parent), c.deadline)
		if c.released.Load() {
			c.cancel()
		}
		c.ready.Store(true)
	}
	return c.inner
}

// release ends the context, as the deferred cancel of a WithDeadline does.
func (c *completionCtx) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released.Store(true)
	if c.ready.Load() {
		c.cancel()
	}
}

func (c *completionCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *completionCtx) Done() <-chan struct{} { return c.materialize().Done() }

func (c *completionCtx) Err() error {
	switch {
	case c.ready.Load():
		return c.inner.Err()
	case c.released.Load():
		return context.Canceled
	case !time.Now().Before(c.deadline):
		return context.DeadlineExceeded
	}
	return nil
}

func (c *completionCtx) Value(key any) any { return c.materialize().Value(key) }

func (c *completionCtx) String() string { return "idem.completionContext" }
