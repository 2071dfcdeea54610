package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
)

// Promise (Permanent): "the record becomes FAILED ... and duplicates get
// the same failure back without running the effect". A failure is the
// call's outcome only once it is recorded: a caller told "failed" may give
// up on the key and try again under a new one, so a duplicate of the old
// key must never run the effect after that. Schedule: the effect fails
// permanently and every FAILED write fails until the completion timeout
// (the record stays PROCESSING); once its lease has passed, a duplicate
// takes it over and runs the effect, which succeeds. The first caller must
// have been told the call is not final (a store error), not the failure.
// The same for a timeout marked permanent (UNKNOWN by the classification
// rule) whose UNKNOWN write fails: ErrOutcomeUnknown, not the failure.
// (Found by the doors simulation under CI's load: pgstore do seed
// 3414713692817812685, a FAILED write that timed out.)
func TestFailureNotRecordedIsNotFinal(t *testing.T) {
	for _, tc := range []struct {
		to   runtime.State
		fail error
		want error // besides the store's error
	}{
		{runtime.StateFailed, runtime.Permanent(errors.New("card declined")), nil},
		{runtime.StateUnknown, runtime.Permanent(fmt.Errorf("card declined? %w", context.DeadlineExceeded)), runtime.ErrOutcomeUnknown},
	} {
		for _, sx := range teststores.All() {
			for _, withQuery := range []bool{false, true} {
				name := string(tc.to) + "/" + sx.Name + "/no-query"
				if withQuery {
					name = string(tc.to) + "/" + sx.Name + "/query"
				}
				t.Run(name, func(t *testing.T) {
					testFailureNotRecorded(t, &teststores.OutcomeDown{Store: sx.New(t), To: tc.to}, tc.fail, tc.want, withQuery)
				})
			}
		}
	}
}

func testFailureNotRecorded(t *testing.T, store *teststores.OutcomeDown, fail, want error, withQuery bool) {
	rt, err := runtime.New(store, runtime.WithLease(300*time.Millisecond),
		runtime.WithCompletionTimeout(200*time.Millisecond), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "tenant-"+teststores.Unique())
	var runs, charged atomic.Int32
	call := runtime.Call[reviewReq, string]{Operation: "Unrecorded.Charge", Key: "k1", Request: reviewReq{1},
		Effect: func(context.Context, reviewReq) (string, error) {
			if runs.Add(1) == 1 {
				store.Down.Store(true)
				return "", fail
			}
			charged.Add(1)
			return "charged", nil
		}}
	if withQuery {
		call.Query = func(context.Context, reviewReq) (string, runtime.Outcome, error) {
			if charged.Load() > 0 {
				return "charged", runtime.OutcomeSucceeded, nil
			}
			return "", runtime.OutcomeNotHappened, nil
		}
	}
	_, err = runtime.Do(ctx, rt, call)
	if store.Failed.Load() == 0 {
		t.Fatalf("no %s write was refused (%v): the schedule was not reproduced", store.To, err)
	}
	var fe *runtime.FailedError
	if err == nil || errors.Is(err, runtime.ErrPermanent) || errors.As(err, &fe) {
		t.Fatalf("first call, its %s write refused: %v; want an error that is not the failure (the outcome was not recorded)", store.To, err)
	}
	if !errors.Is(err, teststores.ErrWritesDown) || !strings.Contains(err.Error(), "card declined") || want != nil && !errors.Is(err, want) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("first call: %v; want the store's error wrapped and the failure quoted", err)
	}
	rec, gerr := store.Get(ctx, runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: call.Operation, Key: call.Key})
	if gerr != nil || rec.State != runtime.StateProcessing {
		t.Fatalf("record after the refused write: %s, %v; want PROCESSING", rec.State, gerr)
	}
	store.Down.Store(false)
	time.Sleep(400 * time.Millisecond) // the first call's lease passes
	got, err := runtime.Do(ctx, rt, call)
	// On a loaded machine one of the retry's own writes can pass the
	// 200 ms write timeout at the store: the takeover's PROCESSING after
	// the query (seen at a load of 20: a store error, nothing charged),
	// or its SUCCESS after the charge (load 17.7: ErrNotRecorded, as
	// documented). The next retry, after that lease, goes on; without a
	// query it may charge again for each unrecorded success (the
	// documented window of an operation without a query), unless the
	// timed-out write was applied after all.
	allowed := int32(1)
	for i := 0; i < 3 && err != nil && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, runtime.ErrOutcomeUnknown) && !errors.Is(err, runtime.ErrPermanent); i++ {
		switch {
		case charged.Load() == 0:
			t.Logf("retry %d: a store write timed out (the machine's load), nothing charged: %v; again after its lease", i, err)
		case errors.Is(err, runtime.ErrNotRecorded) && charged.Load() == allowed:
			if !withQuery {
				allowed++
			}
			t.Logf("retry %d: the charge's SUCCESS write timed out (the machine's load): %v; again after its lease", i, err)
		default:
			t.Fatalf("retry after the lease: %q, %v (charged %d times); want the charge", got, err, charged.Load())
		}
		time.Sleep(400 * time.Millisecond)
		got, err = runtime.Do(ctx, rt, call)
	}
	if err != nil || got != "charged" {
		t.Fatalf("retry after the lease: %q, %v; want the charge", got, err)
	}
	if got, err := runtime.Do(ctx, rt, call); err != nil || got != "charged" || charged.Load() < 1 || charged.Load() > allowed {
		t.Fatalf("duplicate: %q, %v (charged %d times); want the recorded charge, once (at most %d: unrecorded successes without a query)", got, err, charged.Load(), allowed)
	}
}
