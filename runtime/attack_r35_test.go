package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	idem "github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type r35Req struct {
	Amount int `json:"amount"`
}

// r35Quote is a response json cannot encode for some values: a rate that
// came out NaN ("json: unsupported value: NaN"), or a MarshalJSON that
// panics.
type r35Quote struct {
	Rate  float64 `json:"rate"`
	Panic bool    `json:"-"`
}

func (q r35Quote) MarshalJSON() ([]byte, error) {
	if q.Panic {
		panic("r35: MarshalJSON panicked")
	}
	type plain r35Quote
	return json.Marshal(plain(q))
}

// README, "Reconciliation": "Happened: SUCCESS with the query's response.
// [...] Cannot tell, or the query errs: the record stays UNKNOWN"; README,
// "What exactly once means here": "every UNKNOWN converges once the query
// can tell"; README, "Observability": "So is a panic while encoding a
// response (a MarshalJSON, a Codec): the outcome is recorded without the
// response, as for an encoding error (duplicates get ErrNotReplayable)."
//
// A call's effect times out (UNKNOWN). The operation's registered query
// answers "happened" with a response the codec cannot encode (an error, or
// a panic). A duplicate's inline query records it SUCCESS without the
// response (ErrNotReplayable, never a run again), as documented; the
// reconciler, given the very same answer, takes it for "cannot tell": the
// record stays UNKNOWN, its attempts are used up, and it is finally given
// up on for a person, although the query told, on every attempt, that the
// effect happened.
func TestR35ReconcilerUnencodableQueryResponseNeverConverges(t *testing.T) {
	for _, how := range []string{"encode-error", "encode-panic"} {
		for _, sx := range teststores.All() {
			t.Run(how+"/"+sx.Name, func(t *testing.T) {
				testenv.Within(t, 15*time.Second, func() {
					ctx := context.Background()
					rt, err := idem.New(sx.New(t))
					if err != nil {
						t.Fatal(err)
					}
					op := "R35.Quote"
					answer := r35Quote{Rate: math.NaN()}
					if how == "encode-panic" {
						answer = r35Quote{Rate: 1, Panic: true}
					}
					query := func(ctx context.Context, req r35Req) (r35Quote, idem.Outcome, error) {
						return answer, idem.OutcomeSucceeded, nil // the quote was made
					}
					if err := idem.Register(rt, op, query, idem.QueryOptions{}); err != nil {
						t.Fatal(err)
					}
					key := "k-r35-" + teststores.Unique()
					_, err = idem.Do(ctx, rt, idem.Call[r35Req, r35Quote]{
						Operation: op, Key: key, Request: r35Req{Amount: 1},
						Effect: func(ctx context.Context, _ r35Req) (r35Quote, error) {
							return r35Quote{}, fmt.Errorf("quote service: %w", context.DeadlineExceeded)
						},
					})
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("first call: %v, want its timeout", err)
					}
					rec, err := idem.NewReconciler(rt, idem.ReconcileMaxAttempts(1))
					if err != nil {
						t.Fatal(err)
					}
					st, err := rec.RunOnce(ctx)
					if err != nil {
						t.Errorf("reconcile: %v", err)
					}
					got, err := rt.Store().Get(ctx, idem.Identity{Scope: "", Operation: op, Key: key})
					if err != nil {
						t.Fatal(err)
					}
					if got.State != idem.StateSuccess || !got.ResponseOmitted || !strings.Contains(got.Note, "encoding the queried response failed") {
						t.Fatalf("after the reconciler asked the query, which answered happened: record %s, response omitted %v (note %q), stats %+v; want SUCCESS, response omitted, with the encoding error in the note",
							got.State, got.ResponseOmitted, got.Note, st)
					}
					// A retry is told the effect happened, and is not run again.
					ran := false
					_, err = idem.Do(ctx, rt, idem.Call[r35Req, r35Quote]{
						Operation: op, Key: key, Request: r35Req{Amount: 1},
						Effect: func(ctx context.Context, _ r35Req) (r35Quote, error) {
							ran = true
							return r35Quote{Rate: 1}, nil
						},
					})
					if ran || !errors.Is(err, idem.ErrNotReplayable) {
						t.Errorf("a retry after convergence: ran %v, err %v; want ErrNotReplayable, not run", ran, err)
					}
				})
			})
		}
	}
}

// TestR35ControlInlineUnencodableQueryResponseRecorded (passes: the
// control of the test above): the same answer given to a duplicate's inline
// query is recorded SUCCESS without the response (the duplicate that asked gets
// the queried response, the next one ErrNotReplayable), as documented.
func TestR35ControlInlineUnencodableQueryResponseRecorded(t *testing.T) {
	for _, how := range []string{"encode-error", "encode-panic"} {
		for _, sx := range teststores.All() {
			t.Run(how+"/"+sx.Name, func(t *testing.T) {
				testenv.Within(t, 15*time.Second, func() {
					ctx := context.Background()
					rt, err := idem.New(sx.New(t))
					if err != nil {
						t.Fatal(err)
					}
					op := "R35.Quote"
					answer := r35Quote{Rate: math.NaN()}
					if how == "encode-panic" {
						answer = r35Quote{Rate: 1, Panic: true}
					}
					query := func(ctx context.Context, req r35Req) (r35Quote, idem.Outcome, error) {
						return answer, idem.OutcomeSucceeded, nil
					}
					key := "k-r35-" + teststores.Unique()
					call := idem.Call[r35Req, r35Quote]{
						Operation: op, Key: key, Request: r35Req{Amount: 1}, Query: query,
						Effect: func(ctx context.Context, _ r35Req) (r35Quote, error) {
							return r35Quote{}, fmt.Errorf("quote service: %w", context.DeadlineExceeded)
						},
					}
					if _, err := idem.Do(ctx, rt, call); !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("first call: %v, want its timeout", err)
					}
					if _, err := idem.Do(ctx, rt, call); err != nil { // the duplicate asks the query inline: its answer is the call's
						t.Errorf("duplicate: %v, want the queried response", err)
					}
					_, err = idem.Do(ctx, rt, call) // the next one replays
					got, gerr := rt.Store().Get(ctx, idem.Identity{Operation: op, Key: key})
					if gerr != nil {
						t.Fatal(gerr)
					}
					if !errors.Is(err, idem.ErrNotReplayable) || got.State != idem.StateSuccess {
						t.Errorf("next duplicate: %v, record %s; want ErrNotReplayable and SUCCESS", err, got.State)
					}
				})
			})
		}
	}
}

// TestR35QueryPanicNoteNamesTheQuery: a registered query that panics leaves
// the record UNKNOWN; the note of a reconciler that gives up on it says the
// query panicked (it said "effect panicked", sending a person to the wrong
// code).
func TestR35QueryPanicNoteNamesTheQuery(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		ctx := context.Background()
		rt, err := idem.New(memstore.New())
		if err != nil {
			t.Fatal(err)
		}
		op := "R35.Quote"
		query := func(ctx context.Context, req r35Req) (r35Quote, idem.Outcome, error) {
			panic("r35: the quote service client panicked")
		}
		if err := idem.Register(rt, op, query, idem.QueryOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = idem.Do(ctx, rt, idem.Call[r35Req, r35Quote]{
			Operation: op, Key: "k-r35-panic", Request: r35Req{Amount: 1},
			Effect: func(ctx context.Context, _ r35Req) (r35Quote, error) {
				return r35Quote{}, fmt.Errorf("quote service: %w", context.DeadlineExceeded)
			},
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first call: %v, want its timeout", err)
		}
		rec, err := idem.NewReconciler(rt, idem.ReconcileMaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rec.RunOnce(ctx); err != nil {
			t.Errorf("reconcile: %v", err)
		}
		got, err := rt.Store().Get(ctx, idem.Identity{Operation: op, Key: "k-r35-panic"})
		if err != nil {
			t.Fatal(err)
		}
		if got.State != idem.StateUnknown || !strings.Contains(got.Note, "idem: query panicked: r35: the quote service client panicked") {
			t.Errorf("record %s, note %q; want UNKNOWN, the note naming the query's panic", got.State, got.Note)
		}
	})
}
