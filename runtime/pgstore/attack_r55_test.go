package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/pgstore"
)

// Review r55, finding. runtime.WithOwner: "WithOwner sets the owner id
// written into the records this runtime claims (idemctl shows it; the
// default is host/pid/random). Runtimes may share one, in a process or
// across a restart under the same name"; it refuses only an empty owner or
// one over 255 bytes. pgstore's package doc: "A record's note (an error
// quoted, a resolution's reason) is stored as text: bytes that are not
// UTF-8, and NUL, are replaced by U+FFFD, where the memory store and Redis
// keep them as written."
//
// Schedule: runtime.New(store, WithOwner(owner)) with an owner holding a
// NUL byte, or a Latin-1 byte (a host name or a worker name read from a
// Latin-1 environment); one runtime.Do. The option is accepted (New
// returns no error); on the memory store the call succeeds; on
// PostgreSQL every claim is refused by the text column (SQLSTATE 22021):
// every call of the runtime fails with a store error, forever, while the
// same owner works on the other stores. Want: New refuses the owner, or
// PostgreSQL stores it as it stores notes.
func TestR55OwnerNotUTF8(t *testing.T) {
	for _, owner := range []string{"worker\x00a", "caf\xe9-worker"} {
		t.Run(fmt.Sprintf("%q", owner), func(t *testing.T) {
			for _, sx := range []struct {
				name string
				s    runtime.Store
			}{{"memory", memstore.New()}, {"postgres", pgstore.New(testPool(t))}, {"postgres/group", pgstore.New(testPool(t), pgstore.WithGroupCommit(0))}} {
				t.Run(sx.name, func(t *testing.T) {
					testenv.Within(t, 20*time.Second, func() {
						// Fixed: New refuses such an owner on every store,
						// saying why (it accepted it, and every claim on
						// PostgreSQL failed with SQLSTATE 22021).
						_, err := runtime.New(sx.s, runtime.WithOwner(owner), runtime.WithCompletionTimeout(time.Second))
						if err == nil || !strings.Contains(err.Error(), "must be UTF-8 text without NUL") {
							t.Errorf("New with owner %q: %v; want it refused as not UTF-8 text without NUL", owner, err)
						}
					})
				})
			}
		})
	}
}

// Review r55. docs/idemctl.md: "-who NAME says who you are (default
// $USER@hostname ...)"; runtime.Resolution.Owner: "Required, at most 255
// bytes". r54 made a Latin-1 reason resolve on PostgreSQL (its bytes
// replaced); the same terminal's Latin-1 name in -who (José) is the
// record's owner while Resolve holds it and the prefix of the write's
// token. Schedule: an UNKNOWN record (the effect timed out), then Resolve
// to FAILED with Owner "idemctl:jos\xe9"; memory resolves it, PostgreSQL?
func TestR55ResolveLatin1Who(t *testing.T) {
	for _, sx := range []struct {
		name string
		s    runtime.Store
	}{{"memory", memstore.New()}, {"postgres", pgstore.New(testPool(t))}} {
		t.Run(sx.name, func(t *testing.T) {
			testenv.Within(t, 40*time.Second, func() {
				ctx := runtime.WithScope(context.Background(), fmt.Sprintf("r55-who/%d", time.Now().UnixNano()))
				rt, err := runtime.New(sx.s)
				if err != nil {
					t.Fatal(err)
				}
				id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "R55.Who", Key: "k"}
				_, err = runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: id.Operation, Key: id.Key, Request: "x",
					Effect: func(context.Context, string) (string, error) { return "", context.DeadlineExceeded }})
				if !errors.Is(err, runtime.ErrOutcomeUnknown) {
					t.Fatalf("call: %v, want UNKNOWN", err)
				}
				start := time.Now()
				_, err = runtime.Resolve(ctx, sx.s, runtime.Resolution{ID: id, To: runtime.ResolveFailed, Failure: errors.New("refused by the bank"),
					Reason: "bank support", Owner: "idemctl:jos\xe9"})
				rec, gerr := sx.s.Get(ctx, id)
				t.Logf("resolve: %v (%v); record %s owner %q, %v", err, time.Since(start).Round(time.Millisecond), rec.State, rec.Owner, gerr)
				// Fixed: refused at once, saying why, the record left
				// as it was (it was refused by PostgreSQL on the claim).
				if !errors.Is(err, runtime.ErrInvalidResolution) || !strings.Contains(err.Error(), "must be UTF-8 text without NUL") ||
					rec.State != runtime.StateUnknown || rec.Owner != "" {
					t.Errorf("resolve with -who jos\\xe9: %v; record %s owner %q; want ErrInvalidResolution, the record UNKNOWN untouched", err, rec.State, rec.Owner)
				}
			})
		})
	}
}

type r55Unenc struct{ Err string }

func (r r55Unenc) MarshalJSON() ([]byte, error) { return nil, errors.New(r.Err) }

// Review r55 (held). r54 fixed the note of an unencodable response for
// runtime.Do (plain and group commit); this is the same schedule through
// pgstore.DoTx, whose SUCCESS write goes in the caller's transaction:
// runtime.ErrNotReplayable "the call with this identity succeeded, but its
// response was not stored (... or not encodable) ... The effect is not run
// again". The encoding error holds a NUL, bytes not UTF-8, and 64 KiB.
func TestR55DoTxUnencodableResponseNote(t *testing.T) {
	for _, tc := range []struct{ name, text string }{
		{"NUL", "field \x00name"},
		{"Latin-1", "caf\xe9"},
		{"long", strings.Repeat("\xff\x00é", 1<<14)},
	} {
		for _, group := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/group=%v", tc.name, group), func(t *testing.T) {
				testenv.Within(t, 20*time.Second, func() {
					pool := testPool(t)
					var opts []pgstore.Option
					if group {
						opts = append(opts, pgstore.WithGroupCommit(0))
					}
					store := pgstore.New(pool, opts...)
					rt, err := runtime.New(store, runtime.WithCompletionTimeout(2*time.Second), runtime.WithMaxWait(0))
					if err != nil {
						t.Fatal(err)
					}
					ctx := runtime.WithScope(context.Background(), fmt.Sprintf("r55-dotx/%d", time.Now().UnixNano()))
					var runs atomic.Int32
					call := pgstore.TxCall[string, r55Unenc]{Operation: "R55.DoTxNote", Key: "k", Request: "x",
						Effect: func(ctx context.Context, tx pgx.Tx, _ string) (r55Unenc, error) {
							runs.Add(1)
							return r55Unenc{Err: tc.text}, nil
						}}
					for i := range 2 {
						tx, err := pool.Begin(ctx)
						if err != nil {
							t.Fatal(err)
						}
						_, derr := pgstore.DoTx(ctx, rt, tx, call)
						cerr := tx.Commit(ctx)
						t.Logf("call %d: %v (commit %v)", i+1, derr, cerr)
						if i == 0 && (derr != nil || cerr != nil) {
							t.Fatalf("first call: %v, commit %v", derr, cerr)
						}
						if i == 1 && !errors.Is(derr, runtime.ErrNotReplayable) {
							t.Errorf("duplicate: %v, want ErrNotReplayable", derr)
						}
					}
					if runs.Load() != 1 {
						t.Errorf("the effect ran %d times", runs.Load())
					}
				})
			})
		}
	}
}

// Review r55 (held). The reconciler's writes through PostgreSQL's text
// note: a query whose error holds a NUL and a byte that is not UTF-8, on a
// record's last attempt ("a record it gives up on carries a note"), and a
// query that found the effect done with a response that cannot be encoded
// ("left out with a note, and duplicates get ErrNotReplayable").
func TestR55ReconcilerOddNotes(t *testing.T) {
	testenv.Within(t, 30*time.Second, func() {
		store := pgstore.New(testPool(t))
		rt, err := runtime.New(store, runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		scope := fmt.Sprintf("r55-rec/%d", time.Now().UnixNano())
		ctx := runtime.WithScope(context.Background(), scope)
		for _, op := range []string{"R55.GiveUp", "R55.Unenc"} {
			_, err := runtime.Do(ctx, rt, runtime.Call[string, r55Unenc]{Operation: op, Key: "k", Request: "x",
				Effect: func(context.Context, string) (r55Unenc, error) { return r55Unenc{}, context.DeadlineExceeded }})
			if !errors.Is(err, runtime.ErrOutcomeUnknown) {
				t.Fatalf("%s: %v, want UNKNOWN", op, err)
			}
		}
		if err := runtime.Register(rt, "R55.GiveUp", func(context.Context, string) (r55Unenc, runtime.Outcome, error) {
			return r55Unenc{}, runtime.OutcomeUnknown, errors.New("gateway said \x00\xff")
		}, runtime.QueryOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := runtime.Register(rt, "R55.Unenc", func(context.Context, string) (r55Unenc, runtime.Outcome, error) {
			return r55Unenc{Err: "bad \x00 \xfe"}, runtime.OutcomeSucceeded, nil
		}, runtime.QueryOptions{}); err != nil {
			t.Fatal(err)
		}
		rc, err := runtime.NewReconciler(rt, runtime.ReconcileMaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		st, err := rc.RunOnce(ctx)
		t.Logf("reconciler: %+v, %v", st, err)
		g, _ := store.Get(ctx, runtime.Identity{Scope: scope, Operation: "R55.GiveUp", Key: "k"})
		u, _ := store.Get(ctx, runtime.Identity{Scope: scope, Operation: "R55.Unenc", Key: "k"})
		t.Logf("give-up record: %s %q; unencodable: %s omitted=%v %q", g.State, g.Note, u.State, u.ResponseOmitted, u.Note)
		if g.State != runtime.StateUnknown || !strings.Contains(g.Note, "gave up") {
			t.Errorf("give-up record: %s %q", g.State, g.Note)
		}
		if u.State != runtime.StateSuccess || !u.ResponseOmitted {
			t.Errorf("unencodable: %s omitted=%v", u.State, u.ResponseOmitted)
		}
	})
}

// Review r55. runtime.ResolveResult.Note: "Note is the note stored with
// the record." idemctl resolve prints it ("note" in -json, docs/idemctl.md).
// pgstore stores a note with NUL and bytes that are not UTF-8 replaced by
// U+FFFD (r54). Schedule: an UNKNOWN record on PostgreSQL, resolved to
// FAILED with a reason holding a NUL and a Latin-1 byte; compare the
// result's Note with the record's. (The memory store keeps the bytes:
// the two agree there.)
func TestR55ResolveResultNoteIsStored(t *testing.T) {
	for _, sx := range []struct {
		name string
		s    runtime.Store
	}{{"memory", memstore.New()}, {"postgres", pgstore.New(testPool(t))}} {
		t.Run(sx.name, func(t *testing.T) {
			testenv.Within(t, 20*time.Second, func() {
				ctx := runtime.WithScope(context.Background(), fmt.Sprintf("r55-note/%d", time.Now().UnixNano()))
				rt, err := runtime.New(sx.s)
				if err != nil {
					t.Fatal(err)
				}
				id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "R55.Note", Key: "k"}
				_, err = runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: id.Operation, Key: id.Key, Request: "x",
					Effect: func(context.Context, string) (string, error) { return "", context.DeadlineExceeded }})
				if !errors.Is(err, runtime.ErrOutcomeUnknown) {
					t.Fatalf("call: %v, want UNKNOWN", err)
				}
				res, err := runtime.Resolve(ctx, sx.s, runtime.Resolution{ID: id, To: runtime.ResolveFailed, Failure: errors.New("refused"),
					Reason: "case 55\x00 at the caf\xe9", Owner: "idemctl:alice"})
				if err != nil {
					t.Fatalf("resolve: %v", err)
				}
				rec, err := sx.s.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if res.Note != rec.Note {
					t.Errorf("ResolveResult.Note %q, the record's note %q", res.Note, rec.Note)
				}
			})
		})
	}
}

// Review r55 (held). runtime.WithOwner: "Runtimes may share one, in a
// process or across a restart under the same name: ... no runtime's failed
// write is ever taken for another's applied one." Schedule: runtimes A and
// B with one owner id on one store; A claims (300 ms lease; its renewals
// never answer: a paused worker) and its effect
// stalls without honouring its context; B's duplicate takes over after the
// lease and records SUCCESS "b"; A's effect then returns "a". A must be
// told ErrLeaseLost, and every later duplicate gets "b".
func TestR55SharedOwnerTakeover(t *testing.T) {
	for _, sx := range []struct {
		name string
		s    runtime.Store
	}{{"memory", memstore.New()}, {"postgres", pgstore.New(testPool(t))}, {"postgres/group", pgstore.New(testPool(t), pgstore.WithGroupCommit(0))}} {
		t.Run(sx.name, func(t *testing.T) {
			testenv.Within(t, 20*time.Second, func() {
				opts := []runtime.Option{runtime.WithOwner("api-1"), runtime.WithLease(300 * time.Millisecond), runtime.WithMaxWait(0)}
				a, err := runtime.New(r55NoRenew{sx.s}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				b, err := runtime.New(sx.s, opts...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := runtime.WithScope(context.Background(), fmt.Sprintf("r55-same/%d", time.Now().UnixNano()))
				release := make(chan struct{})
				started := make(chan struct{})
				var aResp string
				var aErr error
				done := make(chan struct{})
				go func() {
					defer close(done)
					aResp, aErr = runtime.Do(context.WithoutCancel(ctx), a, runtime.Call[string, string]{Operation: "R55.Same", Key: "k", Request: "x",
						Effect: func(context.Context, string) (string, error) { close(started); <-release; return "a", nil }})
				}()
				<-started
				// Past the lease: A's renewals stop its effect's context (the
				// lease rule) but the effect ignores it.
				var bResp string
				var bErr error
				deadline := time.Now().Add(5 * time.Second)
				for time.Now().Before(deadline) {
					bResp, bErr = runtime.Do(ctx, b, runtime.Call[string, string]{Operation: "R55.Same", Key: "k", Request: "x",
						Effect: func(context.Context, string) (string, error) { return "b", nil }})
					if !errors.Is(bErr, runtime.ErrInProgress) {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				close(release)
				<-done
				t.Logf("A: %q, %v; B: %q, %v", aResp, aErr, bResp, bErr)
				final, ferr := runtime.Do(ctx, b, runtime.Call[string, string]{Operation: "R55.Same", Key: "k", Request: "x",
					Effect: func(context.Context, string) (string, error) { return "c", nil }})
				if bErr == nil && bResp == "b" {
					if aErr == nil {
						t.Errorf("A recorded %q after B's takeover: want ErrLeaseLost or UNKNOWN", aResp)
					}
					if ferr != nil || final != "b" {
						t.Errorf("duplicate after both: %q, %v; want b", final, ferr)
					}
				} else {
					t.Logf("B did not take over (%v); duplicate after: %q, %v", bErr, final, ferr)
				}
			})
		})
	}
}

// r55NoRenew is a store whose renewals never answer in time (a worker
// paused, its connection stalled): its leases run out.
type r55NoRenew struct{ runtime.Store }

func (s r55NoRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	<-ctx.Done()
	return time.Time{}, ctx.Err()
}
