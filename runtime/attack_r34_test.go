package runtime_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	idem "github.com/idemkit/idem/runtime"
)

type r34Req struct {
	Amount int `json:"amount"`
}

// r34ReadHook is the store a person's Resolve runs on: the real store, with
// hook run once right after Resolve's read (Get) returned, to place another
// worker's steps between Resolve's read and its take.
type r34ReadHook struct {
	idem.Store
	hook func()
}

func (s *r34ReadHook) Get(ctx context.Context, id idem.Identity) (idem.Record, error) {
	rec, err := s.Store.Get(ctx, id)
	if h := s.hook; h != nil {
		s.hook = nil
		h()
	}
	return rec, err
}

// `go doc runtime.Resolve`: "Should the record change between the read and
// the take (a reconciler or a worker took it, it was resolved, or it
// vanished and the claim created a new one), Resolve refuses and leaves it
// as it found it".
//
// A worker died holding a claim (attempt 1). An operator looked, found no
// charge for attempt 1 at the gateway, and resolves the record "released"
// at the version looked at (idemctl resolve -version). Between Resolve's
// read and its take, the client's retry takes the dead claim over
// (attempt 2), runs the effect, and its downstream times out: UNKNOWN,
// free (no query). Resolve's take then acquires that UNKNOWN record (the
// same fingerprint, the same created_at) and releases it: a decision about
// attempt 1 applied to attempt 2, which may have charged. The client's next
// retry runs the effect a third time. Resolve checks only that the taken
// record is of the same life (CreatedAt) and, for PROCESSING, that the
// claim did not create it (resolve.go:180-197); nothing compares the
// version the take replaced with the version read.
func TestR34ResolveTakesRecordAWorkerChangedAfterTheRead(t *testing.T) {
	for _, sx := range teststores.All() {
		t.Run(sx.Name, func(t *testing.T) {
			testenv.Within(t, 15*time.Second, func() {
				ctx := context.Background()
				store := sx.New(t)
				rt, err := idem.New(store, idem.WithLease(time.Second), idem.WithMaxWait(0))
				if err != nil {
					t.Fatal(err)
				}
				op, key := "Payments.Charge", "k-"+teststores.Unique()
				id := idem.Identity{Operation: op, Key: key}
				req := r34Req{Amount: 100}
				fp, enc, err := idem.EncodeRequest(rt, req, nil)
				if err != nil {
					t.Fatal(err)
				}
				res, err := store.Claim(ctx, idem.ClaimParams{ID: id, Fingerprint: fp, Request: enc, Owner: "dead-worker", Lease: 150 * time.Millisecond})
				if err != nil || !res.Claimed {
					t.Fatalf("dead worker's claim: %+v %v", res, err)
				}
				time.Sleep(300 * time.Millisecond)
				looked, err := store.Get(ctx, id) // the operator's idemctl show
				if err != nil {
					t.Fatal(err)
				}
				var runs atomic.Int64
				effect := func(ctx context.Context, r r34Req) (string, error) {
					runs.Add(1)
					return "", fmt.Errorf("charge gateway: %w", context.DeadlineExceeded)
				}
				var workerErr error
				hooked := &r34ReadHook{Store: store, hook: func() {
					// The client's retry, on another instance, between Resolve's
					// read and its take.
					_, workerErr = idem.Do(ctx, rt, idem.Call[r34Req, string]{Operation: op, Key: key, Request: req, Effect: effect})
				}}
				rr, rerr := idem.Resolve(ctx, hooked, idem.Resolution{
					ID: id, To: idem.ResolveReleased, Reason: "no charge for attempt 1 at the gateway",
					Owner: "idemctl:alice", Version: looked.Version,
				})
				t.Logf("worker: %v (effect runs %d); resolve: %+v %v", workerErr, runs.Load(), rr.State, rerr)
				if runs.Load() != 1 {
					t.Fatalf("the worker's takeover did not run the effect: %v", workerErr)
				}
				if rerr == nil {
					_, derr := idem.Do(ctx, rt, idem.Call[r34Req, string]{Operation: op, Key: key, Request: req, Effect: effect})
					t.Errorf("Resolve released a record a worker took over, ran and left UNKNOWN after Resolve read it (version read %d): want ErrNotResolvable; the client's next retry ran the effect again (runs %d, %v)",
						looked.Version, runs.Load(), derr)
				}
			})
		})
	}
}
