package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r58Late is a store whose compare-and-set to PROCESSING (the inline
// query's "did not happen" write) is applied at once and answered late,
// and whose renewals fail once armed.
type r58Late struct {
	runtime.Store
	delay     time.Duration
	armed     atomic.Bool
	failRenew atomic.Int32
}

func (s *r58Late) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	v, err := s.Store.Transition(ctx, p)
	if p.To == runtime.StateProcessing && s.delay > 0 {
		time.Sleep(s.delay)
		s.armed.Store(true)
	}
	return v, err
}

func (s *r58Late) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	if s.armed.Load() && s.failRenew.Add(-1) >= 0 {
		return time.Time{}, errors.New("renew: the store is unreachable")
	}
	return s.Store.Renew(ctx, p)
}

type r58Req struct{ N int }

// README, the lease rule: "So does a call whose claim was answered so late
// that its lease may have lapsed before the effect starts: if that renewal
// fails, the effect does not run, the call fails, and a fresh claim is
// released by CAS, so that a retry claims it at once; a record an earlier
// attempt may have acted on, UNKNOWN or taken over, is left to its lease."
//
// An UNKNOWN record (an earlier attempt timed out: it may have acted), or
// one taken over from a dead worker, is claimed by a duplicate with a
// Query; the query says "did not happen"; the compare-and-set to
// PROCESSING is answered late, and the late start's renewal fails. The
// record must be left to its lease (the next call takes it over and asks
// the query again); it was deleted (review r58: the query's answer had
// reset what the call knew of the earlier attempt).
func TestR58LateStartAfterInlineQueryReleasesUnknownRecord(t *testing.T) {
	for _, from := range []string{"unknown", "takenover"} {
		t.Run(from, func(t *testing.T) {
			const lease = 400 * time.Millisecond
			mem := memstore.New()
			store := &r58Late{Store: mem}
			rt, err := runtime.New(store, runtime.WithLease(lease), runtime.WithMaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			id := runtime.Identity{Operation: "R58.Late", Key: "k-" + from}
			var runs, queries atomic.Int32
			call := runtime.Call[r58Req, string]{Operation: id.Operation, Key: id.Key, Request: r58Req{1},
				Effect:      func(context.Context, r58Req) (string, error) { runs.Add(1); return "done", nil },
				Fingerprint: []byte("fp"),
				Query: func(context.Context, r58Req) (string, runtime.Outcome, error) {
					queries.Add(1)
					return "", runtime.OutcomeNotHappened, nil
				}}
			switch from {
			case "unknown":
				first := call
				first.Effect = func(context.Context, r58Req) (string, error) {
					runs.Add(1)
					return "", context.DeadlineExceeded
				}
				if _, err := runtime.Do(ctx, rt, first); !errors.Is(err, runtime.ErrOutcomeUnknown) {
					t.Fatalf("first call: %v, want ErrOutcomeUnknown", err)
				}
			case "takenover":
				// a worker that died holding the claim: its lease expires
				if _, err := mem.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "dead", Lease: 50 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			before, err := mem.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("before: %s v%d takeovers %d", before.State, before.Version, before.Takeovers)
			store.delay = lease * 95 / 100
			store.failRenew.Store(1)
			_, err = runtime.Do(ctx, rt, call)
			t.Logf("duplicate: %v (queries %d, runs %d)", err, queries.Load(), runs.Load())
			if err == nil {
				t.Fatalf("the duplicate succeeded; want the late start's failure")
			}
			rec, gerr := mem.Get(ctx, id)
			if errors.Is(gerr, runtime.ErrNotFound) {
				t.Fatalf("the record (%s, an earlier attempt may have acted on it) was released after the late start failed; README: left to its lease", before.State)
			}
			t.Logf("after: %s v%d takeovers %d, %v", rec.State, rec.Version, rec.Takeovers, gerr)
		})
	}
}
