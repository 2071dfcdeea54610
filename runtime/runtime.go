package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Runtime runs calls against a [Store]. It is safe for concurrent use; make
// one per process and share it.
type Runtime struct {
	store Store
	cfg   config

	mu      sync.RWMutex
	queries map[string]registeredQuery

	// tokens makes the write tokens of this runtime (see newToken).
	tokens *tokens
	// renewals schedules the lease renewals of the calls in flight.
	renewals renewals
	// enc holds the encoders of the default codec's fast path (see
	// [Runtime.encodeRequest]).
	enc encoders
}

// newToken returns a token no other write of any runtime carries: the
// owner id, this runtime's random part and a counter.
func (rt *Runtime) newToken() string {
	return rt.tokens.make()
}

// tokenBatch is how many tokens are made at once: one string holds them
// all, and each token is a substring of it, so a write pays for a
// tokenBatch-th of an allocation. (A record a store keeps holds its
// token's batch: 32 tokens, about one token per record on average.)
const tokenBatch = 32

// tokens hands out write tokens, owner#random.counter, the counter from 1.
//
// A store takes a failed CAS whose record carries the write's token for a
// write it applied (a retry whose first reply was lost), so a token must
// never be made twice, by any runtime. The owner id alone does not ensure
// that: two runtimes of one process may be given the same owner, and a
// process restarted under the same name (a pod's) would count from 1
// again while its records live on. Review r52 made both: a takeover's
// failed CAS taken for the write of another runtime with the same owner
// ran the effect twice with one fencing token. Each runtime's tokens
// therefore carry 64 random bits of its own.
type tokens struct {
	mu     sync.Mutex
	prefix string // owner#random.
	batch  string
	ends   [tokenBatch]int // where each token of batch ends
	used   int             // tokens of batch handed out
	count  uint64          // tokens made so far
}

// newTokens returns the token maker of a runtime with the given owner id.
func newTokens(owner string) *tokens {
	return &tokens{prefix: owner + "#" + randomHex(8) + "."}
}

func (t *tokens) make() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.batch == "" || t.used == tokenBatch {
		b := make([]byte, 0, tokenBatch*(len(t.prefix)+4))
		for i := range tokenBatch {
			t.count++
			b = append(b, t.prefix...)
			b = strconv.AppendUint(b, t.count, 36)
			t.ends[i] = len(b)
		}
		t.batch, t.used = string(b), 0
	}
	start := 0
	if t.used > 0 {
		start = t.ends[t.used-1]
	}
	tok := t.batch[start:t.ends[t.used]]
	t.used++
	return tok
}

// transitionStore runs tp on the store, by the size rule (see
// [fitTransition]): an outcome the store refuses as too large is recorded
// smaller rather than left PROCESSING for a takeover to run the effect
// again. It updates *tp to what was written.
func (rt *Runtime) transitionStore(ctx context.Context, tp *TransitionParams) (int64, error) {
	return fitTransition(ctx, rt.store, tp, nil)
}

// New returns a runtime on store.
func New(store Store, opts ...Option) (*Runtime, error) {
	if store == nil {
		return nil, errors.New("idem: store is nil")
	}
	cfg := config{
		lease:             DefaultLease,
		ttl:               DefaultTTL,
		maxWait:           DefaultMaxWait,
		completionTimeout: DefaultCompletionTimeout,
		queryTimeout:      DefaultQueryTimeout,
		codec:             JSONCodec{},
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.owner == "" {
		cfg.owner = defaultOwner()
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	} else {
		// The runtime logs between a call's steps and on goroutines of its
		// own (renewals, the reconciler): a handler's panic is dropped
		// with its record, never let through.
		cfg.logger = slog.New(safeHandler{cfg.logger.Handler()})
	}
	return &Runtime{store: store, cfg: cfg, queries: make(map[string]registeredQuery), tokens: newTokens(cfg.owner)}, nil
}

// safeHandler is a slog.Handler that recovers its inner handler's panics.
type safeHandler struct{ h slog.Handler }

func (s safeHandler) Enabled(ctx context.Context, l slog.Level) (ok bool) {
	returned := false
	defer func() {
		if !returned {
			recover()
			ok = false
		}
	}()
	ok = s.h.Enabled(ctx, l)
	returned = true
	return ok
}

func (s safeHandler) Handle(ctx context.Context, r slog.Record) (err error) {
	returned := false
	defer func() {
		if !returned {
			err = fmt.Errorf("idem: the log handler panicked: %v", recover())
		}
	}()
	err = s.h.Handle(ctx, r)
	returned = true
	return err
}

func (s safeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return safeHandler{s.h.WithAttrs(attrs)}
}

func (s safeHandler) WithGroup(name string) slog.Handler { return safeHandler{s.h.WithGroup(name)} }

// Store returns the runtime's store.
func (rt *Runtime) Store() Store { return rt.store }

// Owner returns the owner id this runtime writes into records it claims.
func (rt *Runtime) Owner() string { return rt.cfg.owner }

// Lease returns the default lease.
func (rt *Runtime) Lease() time.Duration { return rt.cfg.lease }

// TTL returns the default TTL of finished records.
func (rt *Runtime) TTL() time.Duration { return rt.cfg.ttl }

// Outcome is the answer of a query function to "did this effect happen?".
type Outcome int

const (
	// OutcomeUnknown: the query cannot tell (yet); try again later.
	OutcomeUnknown Outcome = iota
	// OutcomeSucceeded: the effect happened; the query's response is the
	// effect's response.
	OutcomeSucceeded
	// OutcomeFailed: the effect was attempted and definitively failed; the
	// query's error is recorded as the permanent failure.
	OutcomeFailed
	// OutcomeNotHappened: the effect did not happen; it may run again.
	OutcomeNotHappened
)

func (o Outcome) String() string {
	switch o {
	case OutcomeUnknown:
		return "unknown"
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeFailed:
		return "failed"
	case OutcomeNotHappened:
		return "not-happened"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// QueryFunc asks the downstream whether the effect of req happened.
//
// The error goes with [OutcomeFailed] only, as the failure recorded. With
// any other outcome a non-nil error means the query could not tell (Go's
// rule: beside an error the other results are no answer): the record stays
// UNKNOWN, as with [OutcomeUnknown], and is asked again later. A lookup
// that fails must never read as "did not happen", which runs the effect
// again.
type QueryFunc[Req, Resp any] func(ctx context.Context, req Req) (Resp, Outcome, error)

// answered is the outcome a query's results give: o, or [OutcomeUnknown]
// when an error comes with any outcome but [OutcomeFailed].
func answered(o Outcome, err error) Outcome {
	if err != nil && o != OutcomeFailed {
		return OutcomeUnknown
	}
	return o
}

// NotHappenedPolicy says what a reconciler does when a query reports that
// the effect did not happen.
type NotHappenedPolicy int

const (
	// NotHappenedRelease deletes the record so that the client's retry runs
	// the effect (the default).
	NotHappenedRelease NotHappenedPolicy = iota
	// NotHappenedFail records FAILED, so that retries are told it failed.
	NotHappenedFail
)

// QueryOptions tune a registered query.
type QueryOptions struct {
	// NotHappened is the reconciler's policy when the effect did not happen.
	NotHappened NotHappenedPolicy
	// TTL is how long the reconciler keeps records it converges to SUCCESS or
	// FAILED (0: the runtime's TTL). Set it to the operation's TTL.
	TTL time.Duration
}

// NoQueryPolicy says how a reconciler converges the UNKNOWN records (and
// the PROCESSING records whose worker died) of an operation that has no
// query function, so that they do not stay UNKNOWN forever. Until After has
// passed since the record was claimed it stays UNKNOWN, a window in which a
// person may resolve it by hand (idemctl); then the reconciler resolves it
// as Resolve says.
type NoQueryPolicy struct {
	// After is how long after the record was created (its first claim) it
	// is resolved; it must be positive. A takeover that runs the effect
	// again does not restart it (the stores keep no time of the last run).
	// Choose it longer than any downstream's own retry window plus the
	// time a client's retry may take to arrive.
	After time.Duration
	// Resolve is what the reconciler does then. [NotHappenedRelease]
	// deletes the record, so the client's retry runs the effect again: an
	// effect that did happen happens twice (at-least-once).
	// [NotHappenedFail] records FAILED, so retries are told it failed: an
	// effect that did happen is reported failed (at-most-once).
	Resolve NotHappenedPolicy
	// TTL of the FAILED record (0: the runtime's TTL).
	TTL time.Duration
}

// RegisterNoQuery registers p for operation, which has no query function
// (see [NoQueryPolicy]). It replaces an earlier registration of operation,
// with or without a query.
func RegisterNoQuery(rt *Runtime, operation string, p NoQueryPolicy) error {
	if operation == "" {
		return errors.New("idem: register: operation is empty")
	}
	if p.After <= 0 {
		return fmt.Errorf("idem: register %s: NoQueryPolicy.After must be positive, got %v", operation, p.After)
	}
	if p.Resolve != NotHappenedRelease && p.Resolve != NotHappenedFail {
		return fmt.Errorf("idem: register %s: unknown resolve policy %d", operation, int(p.Resolve))
	}
	if p.TTL < 0 {
		return fmt.Errorf("idem: register %s: TTL must not be negative, got %v", operation, p.TTL)
	}
	rq := registeredQuery{opts: QueryOptions{NotHappened: p.Resolve, TTL: p.TTL}, noQueryAfter: p.After}
	rt.mu.Lock()
	rt.queries[operation] = rq
	rt.mu.Unlock()
	return nil
}

// registeredQuery is a query function working on encoded requests, so that a
// reconciler can converge records of calls it never served.
type registeredQuery struct {
	opts QueryOptions
	// run is nil for an operation registered with [RegisterNoQuery], which
	// is resolved noQueryAfter after its claim.
	// short, when not nil, gives the encoded short form of the response
	// (its [Cutter] form) for the size rule.
	run          func(ctx context.Context, request []byte) (response []byte, short responseCutter, o Outcome, err error)
	noQueryAfter time.Duration
	// query is the QueryFunc registered, as given (see [RegisteredQuery]).
	query any
}

// RegisteredQuery returns the query registered on rt for operation with
// [Register], when its request and response types are Req and Resp. An
// adapter placed twice on the way to one handler (idemhttp's middleware
// around a mux and around a route) uses it: the placement that claims
// runs the call with the query another placement gave for the operation,
// so that a duplicate asks it and the request is stored for it.
func RegisteredQuery[Req, Resp any](rt *Runtime, operation string) (QueryFunc[Req, Resp], bool) {
	rt.mu.RLock()
	rq, ok := rt.queries[operation]
	rt.mu.RUnlock()
	if !ok {
		return nil, false
	}
	q, ok := rq.query.(QueryFunc[Req, Resp])
	return q, ok
}

// Register makes query the operation's "did it happen?" function, so that a
// reconciler on rt can converge UNKNOWN and abandoned PROCESSING records of
// operation from their stored request. Registering an operation again
// replaces its query.
func Register[Req, Resp any](rt *Runtime, operation string, query QueryFunc[Req, Resp], opts QueryOptions) error {
	if operation == "" {
		return errors.New("idem: register: operation is empty")
	}
	if query == nil {
		return fmt.Errorf("idem: register %s: query is nil", operation)
	}
	codec := rt.cfg.codec
	rq := registeredQuery{opts: opts, query: query, run: func(ctx context.Context, request []byte) ([]byte, responseCutter, Outcome, error) {
		// The stored request, and the encoded answer, may be a store's own
		// record (memstore keeps one copy) and a Codec may share slices
		// with them: each side gets its own copy (see [Codec]).
		var req Req
		if err := codec.Unmarshal(bytes.Clone(request), &req); err != nil {
			return nil, nil, OutcomeUnknown, fmt.Errorf("idem: %s: decoding stored request: %w", operation, err)
		}
		resp, o, err := query(ctx, req)
		if o = answered(o, err); o != OutcomeSucceeded {
			return nil, nil, o, err
		}
		// Encoded as a call's response is, a panic in its MarshalJSON or
		// the Codec included. A response that cannot be encoded is still
		// the query's "happened": the outcome is succeeded, the error says
		// why the response is left out (the reconciler records SUCCESS
		// without it).
		b, merr := encodeResponse(rt, &resp)
		if merr != nil {
			return nil, nil, OutcomeSucceeded, fmt.Errorf("encoding the queried response failed: %w", merr)
		}
		var short responseCutter
		if c, ok := any(&resp).(Cutter[Resp]); ok {
			// The size rule records the Cutter form of a response the
			// store refuses whole, as it does for an effect's.
			short = cutFunc(func() (b []byte) {
				returned := false
				defer func() {
					if !returned {
						recover()
						b = nil // a Cut or Marshal that panics: no short form
					}
				}()
				s, err := codec.Marshal(c.Cut())
				returned = true
				if err != nil {
					return nil
				}
				return bytes.Clone(s)
			})
		}
		return b, short, o, nil
	}}
	rt.mu.Lock()
	rt.queries[operation] = rq
	rt.mu.Unlock()
	return nil
}

// operationsByKind returns the registered operations with a query and
// those with a no-query policy, each sorted.
func (rt *Runtime) operationsByKind() (queried, noQuery []string) {
	rt.mu.RLock()
	for op, q := range rt.queries {
		if q.run == nil {
			noQuery = append(noQuery, op)
		} else {
			queried = append(queried, op)
		}
	}
	rt.mu.RUnlock()
	sort.Strings(queried)
	sort.Strings(noQuery)
	return queried, noQuery
}

// Operations returns the operations registered with a query or a no-query
// policy (see [Register], [RegisterNoQuery]), sorted.
func (rt *Runtime) Operations() []string {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	ops := make([]string, 0, len(rt.queries))
	for op := range rt.queries {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}
