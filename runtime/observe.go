package runtime

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
)

// EventKind says what happened.
type EventKind int

// The events a [Runtime], [Reconciler] and [Sweeper] report.
const (
	// EventClaimed: a new record was claimed and the effect will run.
	EventClaimed EventKind = iota + 1
	// EventReplayed: a duplicate got the stored SUCCESS or FAILED outcome.
	EventReplayed
	// EventInProgress: a duplicate gave up waiting (ErrInProgress).
	EventInProgress
	// EventKeyReused: a key came back with another request (ErrKeyReused).
	EventKeyReused
	// EventTakeover: an expired lease was taken over.
	EventTakeover
	// EventSucceeded, EventFailed, EventReleased: the outcome recorded
	// after the effect ran.
	EventSucceeded
	EventFailed
	EventReleased
	// EventUnknown: an outcome became (or stayed) UNKNOWN.
	EventUnknown
	// EventReconciled: a query converged an UNKNOWN or abandoned record;
	// Event.State is the state it converged to ("" when released).
	EventReconciled
	// EventReconcileGaveUp: a record reached the reconciler's attempt limit
	// and stays UNKNOWN for a human to look at.
	EventReconcileGaveUp
	// EventLeaseLost: a worker's lease was taken over; its write was refused.
	EventLeaseLost
	// EventSwept: finished records past their TTL were deleted (Event.Count).
	EventSwept
	// EventPhase: a phase of a call finished (Event.Phase, Event.Duration).
	EventPhase
)

var eventNames = [...]string{
	EventClaimed: "claimed", EventReplayed: "replayed", EventInProgress: "in_progress",
	EventKeyReused: "key_reused", EventTakeover: "takeover", EventSucceeded: "succeeded",
	EventFailed: "failed", EventReleased: "released", EventUnknown: "unknown",
	EventReconciled: "reconciled", EventReconcileGaveUp: "reconcile_gave_up",
	EventLeaseLost: "lease_lost", EventSwept: "swept", EventPhase: "phase",
}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Phase names a timed part of a call.
type Phase string

// The phases reported with [EventPhase].
const (
	PhaseClaim     Phase = "claim"
	PhaseWait      Phase = "wait"
	PhaseEffect    Phase = "effect"
	PhaseComplete  Phase = "complete"
	PhaseQuery     Phase = "query"
	PhaseReconcile Phase = "reconcile"
	PhaseSweep     Phase = "sweep"
)

// Event is one observation.
type Event struct {
	Kind      EventKind
	Operation string
	Phase     Phase
	Duration  time.Duration
	// State is the record's state the event is about, where one applies.
	State State
	// Count is how many records a batch event covers (EventSwept).
	Count int
	// Err is the error involved, if any.
	Err error
}

// Observer receives events, for metrics and tracing. Observe is called
// synchronously on the call's goroutine: keep it fast and non-blocking.
// A panic in Observe is recovered and logged (at ERROR, with its stack, by
// the runtime's logger): the runtime observes between the steps of a
// call's protocol, and an observer's panic must not leave one half done
// (a claim whose renewals never stop, a local call's writes kept without
// their record). runtime/otelidem adapts it to OpenTelemetry metrics.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(ctx context.Context, e Event)

// Observe implements [Observer].
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// WithObserver sets the observer of the runtime's events (default: none).
func WithObserver(o Observer) Option {
	return func(c *config) error {
		c.observer = o
		return nil
	}
}

func (rt *Runtime) emit(ctx context.Context, e Event) {
	if rt.cfg.observer != nil {
		rt.observe(ctx, e)
	}
}

// observe hands e to the observer, recovering its panic (see [Observer]).
func (rt *Runtime) observe(ctx context.Context, e Event) {
	returned := false
	defer func() {
		if !returned {
			v := recover()
			rt.cfg.logger.ErrorContext(ctx, "idem: the observer panicked; the call goes on",
				"event", e.Kind, "operation", e.Operation, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	rt.cfg.observer.Observe(ctx, e)
	returned = true
}

// phaseStart returns the start of a phase that only its observation
// needs: the zero time when nothing observes.
func (rt *Runtime) phaseStart() time.Time {
	if rt.cfg.observer == nil {
		return time.Time{}
	}
	return time.Now()
}

func (rt *Runtime) phase(ctx context.Context, op string, p Phase, start time.Time) {
	if rt.cfg.observer != nil {
		rt.observe(ctx, Event{Kind: EventPhase, Operation: op, Phase: p, Duration: time.Since(start)})
	}
}
