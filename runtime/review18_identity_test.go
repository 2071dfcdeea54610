package runtime_test

// Adversarial review 18 of identity checking: runtime.Do must never answer
// a caller with the record of another identity, whatever a store returns
// (a store bug, a connection out of step), at the claim, at a wait's Get,
// or when the store claims the wrong record; and identities that look
// alike (case, spaces, separators, Unicode forms) must stay apart on every
// store.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
)

// crossGet answers Get for own with the record of other: a store whose
// connection fell out of step between a claim and a poll.
type crossGet struct {
	runtime.Store
	own, other runtime.Identity
}

func (s crossGet) Get(ctx context.Context, id runtime.Identity) (runtime.Record, error) {
	if id == s.own {
		id = s.other
	}
	return s.Store.Get(ctx, id)
}

// crossClaimed claims other when asked for own, and reports it granted:
// a store that inserted the wrong row.
type crossClaimed struct {
	runtime.Store
	own, other runtime.Identity
}

func (s crossClaimed) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	if p.ID == s.own {
		p.ID = s.other
	}
	return s.Store.Claim(ctx, p)
}

var review18Stores = []teststores.Store{{Name: "memory", New: teststores.Memory}, {Name: "postgres", New: teststores.Postgres}, {Name: "redis", New: teststores.Redis}}

// Promise: a duplicate polling a call in flight never replays a record
// of another identity. Schedule: tenant-b's call of (Pay, k, "r")
// succeeds. tenant-a's first call of the same operation, key and request
// runs (its effect blocks); tenant-a's duplicate polls, and the store's Get
// answers with tenant-b's SUCCESS record. The duplicate must get an error,
// not tenant-b's receipt, and no effect may run twice.
func TestReview18WaitNeverReplaysAnotherIdentity(t *testing.T) {
	for _, st := range review18Stores {
		t.Run(st.Name, func(t *testing.T) {
			store := st.New(t)
			own := runtime.Identity{Scope: "tenant-a", Operation: "Pay", Key: "k"}
			other := runtime.Identity{Scope: "tenant-b", Operation: "Pay", Key: "k"}
			plain, err := runtime.New(store, runtime.WithMaxWait(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			release := make(chan struct{})
			call := func(receipt string, block bool) runtime.Call[string, string] {
				return runtime.Call[string, string]{Operation: "Pay", Key: "k", Request: "r",
					Effect: func(context.Context, string) (string, error) {
						runs.Add(1)
						if block {
							<-release
						}
						return receipt, nil
					}}
			}
			if _, err := runtime.Do(runtime.WithScope(context.Background(), other.Scope), plain, call("tenant-b's receipt", false)); err != nil {
				t.Fatal(err)
			}
			first := make(chan error, 1)
			go func() {
				_, err := runtime.Do(runtime.WithScope(context.Background(), own.Scope), plain, call("tenant-a's receipt", true))
				first <- err
			}()
			for deadline := time.Now().Add(5 * time.Second); runs.Load() < 2; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("tenant-a's first call did not start")
				}
			}
			crossed, err := runtime.New(crossGet{Store: store, own: own, other: other}, runtime.WithMaxWait(3*time.Second), runtime.WithOwner("dup"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := runtime.Do(runtime.WithScope(context.Background(), own.Scope), crossed, call("duplicate ran", false))
			close(release)
			if err == nil || got != "" {
				t.Errorf("tenant-a's duplicate, polled with tenant-b's record: %q, %v; want an error and no response", got, err)
			}
			if err := <-first; err != nil {
				t.Errorf("tenant-a's first call: %v", err)
			}
			if n := runs.Load(); n != 2 {
				t.Errorf("%d effects, want 2 (one per tenant)", n)
			}
		})
	}
}

// Promise: a claim the store grants on another identity's record never
// runs the effect as if it were the caller's. Schedule: the store claims
// tenant-b's identity when tenant-a's is asked, and says granted.
func TestReview18ClaimGrantedOnAnotherIdentity(t *testing.T) {
	for _, st := range review18Stores {
		t.Run(st.Name, func(t *testing.T) {
			store := st.New(t)
			own := runtime.Identity{Scope: "tenant-a", Operation: "Pay", Key: "k"}
			other := runtime.Identity{Scope: "tenant-b", Operation: "Pay", Key: "k"}
			rt, err := runtime.New(crossClaimed{Store: store, own: own, other: other})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			got, err := runtime.Do(runtime.WithScope(context.Background(), own.Scope), rt, runtime.Call[string, string]{Operation: "Pay", Key: "k", Request: "r",
				Effect: func(context.Context, string) (string, error) { runs.Add(1); return "receipt", nil }})
			if err == nil || got != "" || runs.Load() != 0 {
				t.Errorf("a claim granted on tenant-b's record: %q, %v, %d effects; want an error and no effect", got, err, runs.Load())
			}
		})
	}
}

// Promise: scoped keys; each identity has its own record. Schedule: 12
// identities that differ only in case, a trailing space, where a separator
// falls (scope "a:b"/op "c" against scope "a"/op "b:c"), a hash-tag brace,
// the empty scope, and the Unicode form of the scope (NFC "é" against NFD
// "e" + U+0301), called at once, twice each round for 3 rounds; every
// caller gets its own identity's response and each effect runs once.
func TestReview18LookalikeIdentitiesStayApart(t *testing.T) {
	ids := []runtime.Identity{
		{Scope: "t", Operation: "Op", Key: "k"},
		{Scope: "T", Operation: "Op", Key: "k"},
		{Scope: "t ", Operation: "Op", Key: "k"},
		{Scope: "", Operation: "Op", Key: "k"},
		{Scope: "t", Operation: "op", Key: "k"},
		{Scope: "t", Operation: "Op", Key: "K"},
		{Scope: "a:b", Operation: "c", Key: "d"},
		{Scope: "a", Operation: "b:c", Key: "d"},
		{Scope: "a", Operation: "b", Key: "c:d"},
		{Scope: "{a}", Operation: "b", Key: "d"},
		{Scope: "\u00e9", Operation: "Op", Key: "k"},
		{Scope: "e\u0301", Operation: "Op", Key: "k"},
	}
	for _, st := range review18Stores {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for round := range 3 {
				var runs [len("............")]atomic.Int32
				var wg sync.WaitGroup
				for i, id := range ids {
					for range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							key := fmt.Sprint(id.Key, "-", round)
							got, err := runtime.Do(runtime.WithScope(context.Background(), id.Scope), rt, runtime.Call[string, string]{
								Operation: id.Operation, Key: key, Request: "same request",
								Effect: func(context.Context, string) (string, error) { runs[i].Add(1); return fmt.Sprint("response ", i), nil }})
							if err != nil && !errors.Is(err, runtime.ErrInProgress) || err == nil && got != fmt.Sprint("response ", i) {
								t.Errorf("identity %d %q/%q/%q: %q, %v; want %q", i, id.Scope, id.Operation, key, got, err, fmt.Sprint("response ", i))
							}
						}()
					}
				}
				wg.Wait()
				for i := range ids {
					if n := runs[i].Load(); n != 1 {
						t.Errorf("round %d identity %d: %d effects", round, i, n)
					}
				}
			}
		})
	}
}
