package runtime_test

// Adversarial review of issue 17: PostgreSQL's claim now reads first and
// inserts only on a miss, and group commit claims a batch with one
// set-based statement. Whatever path answers, the record a claim returns
// must be the record as stored, every field of it: a replay path that
// forgets a column (response_omitted, note, the store's clock, takeovers)
// turns a failure into a success, an omitted response into an empty one,
// or a live lease into an expired one.

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

var (
	r17PoolOnce sync.Once
	r17Pool     *pgxpool.Pool
	r17PoolErr  error
)

// r17Stores is every store, and PostgreSQL with group commit as well.
func r17Stores() []teststores.Store {
	stores := teststores.All()
	return append(stores, teststores.Store{Name: "postgres-group", New: func(t testing.TB) runtime.Store {
		t.Helper()
		dsn := testenv.PostgresURL(t)
		r17PoolOnce.Do(func() {
			r17Pool, r17PoolErr = pgxpool.New(context.Background(), dsn)
			if r17PoolErr == nil {
				r17PoolErr = pgstore.Migrate(context.Background(), r17Pool)
			}
		})
		if r17PoolErr != nil {
			t.Fatal(r17PoolErr)
		}
		return pgstore.New(r17Pool, pgstore.WithGroupCommit(16))
	}})
}

// sameRecord compares every field but StoreNow, which must be close to now.
func sameRecord(t *testing.T, what string, got, want runtime.Record) {
	t.Helper()
	if got.StoreNow.IsZero() || time.Since(got.StoreNow).Abs() > 5*time.Second {
		t.Errorf("%s: StoreNow %v is not the store's clock", what, got.StoreNow)
	}
	got.StoreNow, want.StoreNow = time.Time{}, time.Time{}
	norm := func(r *runtime.Record) {
		for _, tm := range []*time.Time{&r.LeaseExpiresAt, &r.ExpiresAt, &r.CreatedAt, &r.UpdatedAt} {
			*tm = tm.UTC().Truncate(time.Microsecond)
		}
		if len(r.Request) == 0 {
			r.Request = nil
		}
		if len(r.Response) == 0 {
			r.Response = nil
		}
	}
	norm(&got)
	norm(&want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: the claim returned\n%+v\nthe store holds\n%+v", what, got, want)
	}
}

// Promise: a claim that is not granted returns the stored record, every
// field; one that is granted returns the record it wrote. Schedule: a
// record in each state a duplicate can meet (PROCESSING live, SUCCESS,
// SUCCESS without its response and with a note, FAILED, UNKNOWN free,
// UNKNOWN held, PROCESSING taken over once), claimed again with the same
// and with another fingerprint, with and without AcquireUnknown, several
// times (the replay path may be prepared after a few runs); on every store.
func TestReview17ClaimReturnsTheRecord(t *testing.T) {
	for _, st := range r17Stores() {
		t.Run(st.Name, func(t *testing.T) {
			s := st.New(t)
			ctx := context.Background()
			scope := "r17-" + teststores.Unique()
			n := 0
			newID := func() runtime.Identity {
				n++
				return runtime.Identity{Scope: scope, Operation: "R17.Claim", Key: fmt.Sprint("k", n)}
			}
			claim := func(id runtime.Identity, owner string, lease time.Duration) runtime.Record {
				t.Helper()
				res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Request: []byte(`{"r":1}`), Owner: owner, Lease: lease})
				if err != nil || !res.Claimed {
					t.Fatalf("claim %v: %+v %v", id, res, err)
				}
				return res.Record
			}
			trans := func(rec runtime.Record, tp runtime.TransitionParams) {
				t.Helper()
				tp.ID, tp.From, tp.Owner, tp.Version = rec.ID, rec.State, rec.Owner, rec.Version
				if _, err := s.Transition(ctx, tp); err != nil {
					t.Fatalf("transition %v to %s: %v", rec.ID, tp.To, err)
				}
			}
			type setup struct {
				name string
				make func() runtime.Identity
			}
			setups := []setup{
				{"processing live", func() runtime.Identity { id := newID(); claim(id, "w1", time.Hour); return id }},
				{"success", func() runtime.Identity {
					id := newID()
					trans(claim(id, "w1", time.Hour), runtime.TransitionParams{To: runtime.StateSuccess, Response: []byte(`{"ok":1}`), TTL: time.Hour, Token: "t-" + scope + fmt.Sprint(n)})
					return id
				}},
				{"success omitted", func() runtime.Identity {
					id := newID()
					trans(claim(id, "w1", time.Hour), runtime.TransitionParams{To: runtime.StateSuccess, ResponseOmitted: true, Note: "too large: 2 MiB", TTL: time.Hour, Token: "t-" + scope + fmt.Sprint(n)})
					return id
				}},
				{"failed", func() runtime.Identity {
					id := newID()
					trans(claim(id, "w1", time.Hour), runtime.TransitionParams{To: runtime.StateFailed, Response: []byte(`{"message":"declined"}`), TTL: time.Hour, Token: "t-" + scope + fmt.Sprint(n)})
					return id
				}},
				{"unknown free", func() runtime.Identity {
					id := newID()
					trans(claim(id, "w1", time.Hour), runtime.TransitionParams{To: runtime.StateUnknown, Note: "timed out", Token: "t-" + scope + fmt.Sprint(n)})
					return id
				}},
				{"unknown held", func() runtime.Identity {
					id := newID()
					trans(claim(id, "w1", time.Hour), runtime.TransitionParams{To: runtime.StateUnknown, NewOwner: "rec", Lease: time.Hour, Token: "t-" + scope + fmt.Sprint(n)})
					return id
				}},
				{"taken over, live", func() runtime.Identity {
					id := newID()
					claim(id, "w1", 20*time.Millisecond)
					time.Sleep(60 * time.Millisecond)
					claim(id, "w2", time.Hour) // a takeover
					return id
				}},
			}
			for _, su := range setups {
				id := su.make()
				for _, fp := range []string{"fp", "other"} {
					for _, acq := range []bool{false, true} {
						for rep := range 6 {
							res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte(fp), Request: []byte(`{"r":2}`), Owner: "dup", Lease: time.Minute, AcquireUnknown: acq})
							what := fmt.Sprintf("%s, fingerprint %s, acquire %v, try %d", su.name, fp, acq, rep)
							if err != nil {
								t.Fatalf("%s: %v", what, err)
							}
							if res.Claimed {
								if su.name == "unknown free" && fp == "fp" && acq {
									// Taken for reconciliation: the record it wrote.
									if res.Record.Owner != "dup" || res.Record.State != runtime.StateUnknown {
										t.Errorf("%s: acquired %+v", what, res.Record)
									}
									break
								}
								t.Fatalf("%s: claimed a record it must not take: %+v", what, res.Record)
							}
							got, err := s.Get(ctx, id)
							if err != nil {
								t.Fatal(err)
							}
							sameRecord(t, what, res.Record, got)
						}
					}
				}
			}
		})
	}
}

// Promise: claims are atomic. Of many concurrent claims of one identity
// exactly one is granted, and every other gets the record (no error, no
// empty answer), whether the identity is absent, a finished record whose
// TTL passed (replaced by a new claim), a PROCESSING record whose lease
// expired (taken over), or an UNKNOWN record free for reconciliation
// (acquired). Schedule: per case and round, 32 claims released at once
// on a fresh identity; on every store and PostgreSQL with group commit.
func TestReview17ConcurrentClaimsAtomic(t *testing.T) {
	for _, st := range r17Stores() {
		t.Run(st.Name, func(t *testing.T) {
			s := st.New(t)
			ctx := context.Background()
			scope := "r17-" + teststores.Unique()
			prepare := map[string]func(id runtime.Identity){
				"absent": func(runtime.Identity) {},
				"ttl passed": func(id runtime.Identity) {
					res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("old"), Owner: "w0", Lease: time.Hour})
					if err != nil || !res.Claimed {
						t.Fatal(res, err)
					}
					if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, To: runtime.StateSuccess, Owner: "w0",
						Version: res.Record.Version, Response: []byte(`"old"`), TTL: 20 * time.Millisecond, Token: "t0" + id.Key}); err != nil {
						t.Fatal(err)
					}
					time.Sleep(60 * time.Millisecond)
				},
				"lease expired": func(id runtime.Identity) {
					res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "w0", Lease: 20 * time.Millisecond})
					if err != nil || !res.Claimed {
						t.Fatal(res, err)
					}
					time.Sleep(60 * time.Millisecond)
				},
				"unknown free": func(id runtime.Identity) {
					res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: "w0", Lease: time.Hour})
					if err != nil || !res.Claimed {
						t.Fatal(res, err)
					}
					if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, To: runtime.StateUnknown, Owner: "w0",
						Version: res.Record.Version, Token: "t0" + id.Key}); err != nil {
						t.Fatal(err)
					}
				},
			}
			for name, prep := range prepare {
				for round := range 8 {
					id := runtime.Identity{Scope: scope, Operation: "R17.Atomic", Key: fmt.Sprintf("%s-%d", name, round)}
					prep(id)
					var mu sync.Mutex
					var granted []string
					var errs []error
					versions := map[int64]bool{}
					var wg sync.WaitGroup
					start := make(chan struct{})
					for i := range 32 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							owner := fmt.Sprint("w", i+1)
							res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("fp"), Owner: owner, Lease: time.Hour, AcquireUnknown: true})
							mu.Lock()
							defer mu.Unlock()
							switch {
							case err != nil:
								errs = append(errs, err)
							case res.Record.ID != id || res.Record.Version == 0:
								errs = append(errs, fmt.Errorf("answer for another or no record: %+v", res.Record))
							case res.Claimed:
								granted = append(granted, owner)
								versions[res.Record.Version] = true
								if res.Record.Owner != owner {
									errs = append(errs, fmt.Errorf("granted to %s, record owned by %s", owner, res.Record.Owner))
								}
							}
						}()
					}
					close(start)
					wg.Wait()
					for _, err := range errs {
						t.Errorf("%s round %d: %v", name, round, err)
					}
					if len(granted) != 1 {
						t.Fatalf("%s round %d: claims granted to %v; want exactly one", name, round, granted)
					}
					rec, err := s.Get(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if rec.Owner != granted[0] || !versions[rec.Version] {
						t.Errorf("%s round %d: the record is owned by %s at version %d; the claim went to %s", name, round, rec.Owner, rec.Version, granted[0])
					}
				}
			}
		})
	}
}

// Promise: identities never collide, whatever bytes they hold, and a batch
// hands each caller its own row. Keys are any visible ASCII, scopes and
// operations any UTF-8 without control bytes: the characters that array
// literals, CSV, Redis hash tags and JSON treat specially must not shift
// or merge rows. Schedule: 40 such identities claimed at once (one batch
// under group commit), each with its own fingerprint, request and owner,
// then completed at once with its own response and read back.
func TestReview17NastyIdentitiesInOneBatch(t *testing.T) {
	keys := []string{`a,b`, `{x}`, `"q"`, `\`, `\\"`, `NULL`, `null`, `{a,b}`, `}{`, `'`, `a"b,c{d}e\f`, `[1]`, `(x)`, `$1`, `%s`, `*`, `?`, `:`, `{tag}k`, `k{tag}`}
	scopes := []string{"", "NULL", "a b", "é,{}", `"`, "{x}"}
	for _, st := range r17Stores() {
		t.Run(st.Name, func(t *testing.T) {
			s := st.New(t)
			ctx := context.Background()
			u := teststores.Unique()
			var ids []runtime.Identity
			for i, k := range keys {
				ids = append(ids, runtime.Identity{Scope: scopes[i%len(scopes)] + u, Operation: "R17.Nasty", Key: k})
				ids = append(ids, runtime.Identity{Scope: u, Operation: `Op,{"x"}\` + scopes[i%len(scopes)], Key: k})
			}
			var wg sync.WaitGroup
			start := make(chan struct{})
			versions := make([]int64, len(ids))
			for i, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte(fmt.Sprint("fp", i)), Request: []byte(fmt.Sprintf(`{"i":%d}`, i)), Owner: fmt.Sprint("w", i), Lease: time.Hour})
					switch {
					case err != nil:
						t.Errorf("claim %q: %v", id, err)
					case !res.Claimed || res.Record.ID != id || string(res.Record.Fingerprint) != fmt.Sprint("fp", i) || res.Record.Owner != fmt.Sprint("w", i):
						t.Errorf("claim %q: claimed %v, got record %q fp %q owner %q", id, res.Claimed, res.Record.ID, res.Record.Fingerprint, res.Record.Owner)
					default:
						versions[i] = res.Record.Version
					}
				}()
			}
			close(start)
			wg.Wait()
			if t.Failed() {
				return
			}
			start = make(chan struct{})
			for i, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, To: runtime.StateSuccess, Owner: fmt.Sprint("w", i),
						Version: versions[i], Response: []byte(fmt.Sprintf(`{"resp":%d}`, i)), TTL: time.Hour, Token: fmt.Sprint(u, "-", i)}); err != nil {
						t.Errorf("complete %q: %v", id, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			for i, id := range ids {
				rec, err := s.Get(ctx, id)
				if err != nil {
					t.Errorf("get %q: %v", id, err)
					continue
				}
				if rec.ID != id || string(rec.Response) != fmt.Sprintf(`{"resp":%d}`, i) || string(rec.Request) != fmt.Sprintf(`{"i":%d}`, i) || rec.State != runtime.StateSuccess {
					t.Errorf("record %q: id %q state %s request %s response %s", id, rec.ID, rec.State, rec.Request, rec.Response)
				}
			}
		})
	}
}
