// Regression tests from the fresh review of issue 29: the size rule's
// shortening of a FAILED record always ends (a note cut to 256 bytes plus
// its mark stayed over 256, and Do spun at full CPU), and timeouts anywhere
// in an error tree are classified as unknown.

package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type a29Cyclic struct{ next error }

func (e *a29Cyclic) Error() string { return "cyclic" }
func (e *a29Cyclic) Unwrap() error { return e.next }

type a29Multi struct{ errs []error }

func (e *a29Multi) Error() string   { return "multi" }
func (e *a29Multi) Unwrap() []error { return e.errs }

type a29NetTimeout struct{}

func (a29NetTimeout) Error() string   { return "i/o timeout" }
func (a29NetTimeout) Timeout() bool   { return true }
func (a29NetTimeout) Temporary() bool { return false }

func a29TimeoutErrors() map[string]error {
	m := map[string]error{}
	m["join"] = runtime.Permanent(errors.Join(errors.New("x"), fmt.Errorf("a: %w", context.DeadlineExceeded)))
	// 20,000 levels of fmt.Errorf's wrapping; %.0w keeps each level's
	// message short (a full message per level is 20,000 copies of a
	// growing string: 4 GB, two minutes under -race, for nothing the test
	// checks).
	deep := error(context.DeadlineExceeded)
	for i := 0; i < 20000; i++ {
		deep = fmt.Errorf("l%d: %.0w", i, deep)
	}
	m["deep"] = runtime.Permanent(deep)
	c1 := &a29Cyclic{}
	c2 := &a29Multi{errs: []error{c1, errors.New("y"), context.DeadlineExceeded}}
	c1.next = c2
	m["cycle"] = runtime.Permanent(c1)
	c3 := &a29Multi{}
	c3.errs = []error{c3, nil, c3, fmt.Errorf("w: %w", context.DeadlineExceeded)}
	m["selfcycle-nil"] = runtime.Permanent(c3)
	m["netTimeout"] = runtime.Permanent(fmt.Errorf("gw: %w", a29NetTimeout{}))
	m["osDeadline"] = runtime.Permanent(fmt.Errorf("gw: %w", os.ErrDeadlineExceeded))
	m["opError"] = runtime.Permanent(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})
	m["urlError"] = runtime.Permanent(&url.Error{Op: "Post", URL: "http://x", Err: a29NetTimeout{}})
	m["grpcDeadlineWrapped"] = runtime.Permanent(fmt.Errorf("gw: %w", status.Error(codes.DeadlineExceeded, "dl")))
	m["grpcDeadlineJoined"] = runtime.Permanent(errors.Join(errors.New("a"), status.Error(codes.DeadlineExceeded, "dl")))
	m["retryableJoin"] = runtime.Retryable(errors.Join(errors.New("a"), context.DeadlineExceeded))
	m["permanentInside"] = fmt.Errorf("x: %w", errors.Join(runtime.Permanent(errors.New("p")), context.DeadlineExceeded))
	m["permanentOfPermanent"] = runtime.Permanent(runtime.Permanent(&a29Multi{errs: []error{&a29Multi{errs: []error{nil, context.DeadlineExceeded}}}}))
	wide := make([]error, 3000)
	for i := range wide {
		wide[i] = errors.New("e")
	}
	wide[2999] = context.DeadlineExceeded
	m["wide"] = runtime.Permanent(errors.Join(wide...))
	// wide DAG: same node reachable by many paths, timeout at the bottom
	dag := error(context.DeadlineExceeded)
	for i := 0; i < 60; i++ {
		dag = &a29Multi{errs: []error{dag, dag}}
	}
	m["dag"] = runtime.Permanent(dag)
	return m
}

func TestReview29TimeoutIsUnknown(t *testing.T) {
	for _, pol := range []runtime.ErrorPolicy{runtime.RecordUnknown, runtime.RecordFailed} {
		for name, e := range a29TimeoutErrors() {
			t.Run(fmt.Sprintf("%v/%s", pol, name), func(t *testing.T) {
				rt, err := runtime.New(memstore.New(), runtime.WithErrorPolicy(pol))
				if err != nil {
					t.Fatal(err)
				}
				if !runtime.Uncertain(e) || rt.Classify(e) != runtime.StateUnknown {
					t.Errorf("Uncertain %v Classify %v", runtime.Uncertain(e), rt.Classify(e))
				}
				runs := 0
				call := runtime.Call[string, string]{Operation: "A.B", Key: "k1", Request: "r",
					Effect: func(ctx context.Context, req string) (string, error) { runs++; return "", e }}
				_, err = runtime.Do(context.Background(), rt, call)
				if !errors.Is(err, runtime.ErrOutcomeUnknown) {
					t.Errorf("first: %v", err)
				}
				_, err = runtime.Do(context.Background(), rt, call)
				if !errors.Is(err, runtime.ErrOutcomeUnknown) || errors.Is(err, runtime.ErrPermanent) || runs != 1 {
					t.Errorf("dup: %v runs %d", err, runs)
				}
			})
		}
	}
}

// Queries see the scope the effect ran in: Call.Scope vs the context's.
type a29Tenants struct {
	mu   sync.Mutex
	done map[string]bool
	runs int
	seen []string
}

func TestReview29DoQueryScope(t *testing.T) {
	for _, mode := range []string{"callScope", "ctxScope", "both"} {
		for _, rec := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/rec=%v", mode, rec), func(t *testing.T) {
				store := memstore.New()
				d := &a29Tenants{done: map[string]bool{}}
				q := func(ctx context.Context, req string) (string, runtime.Outcome, error) {
					d.mu.Lock()
					defer d.mu.Unlock()
					d.seen = append(d.seen, runtime.ScopeFrom(ctx))
					if d.done[runtime.ScopeFrom(ctx)+"/"+req] {
						return "ok", runtime.OutcomeSucceeded, nil
					}
					return "", runtime.OutcomeNotHappened, nil
				}
				rt, _ := runtime.New(store)
				ctx := context.Background()
				call := runtime.Call[string, string]{Operation: "Pay.Charge", Key: "k1", Request: "o1", Query: q,
					Effect: func(ctx context.Context, req string) (string, error) {
						d.mu.Lock()
						d.runs++
						d.done[runtime.ScopeFrom(ctx)+"/"+req] = true
						d.mu.Unlock()
						return "", context.DeadlineExceeded
					}}
				switch mode {
				case "callScope":
					call.Scope = "tenant-a"
				case "ctxScope":
					ctx = runtime.WithScope(ctx, "tenant-a")
				case "both":
					call.Scope = "tenant-a"
					ctx = runtime.WithScope(ctx, "tenant-b")
				}
				runtime.Do(ctx, rt, call)
				if rec {
					rrt, _ := runtime.New(store)
					runtime.Register(rrt, "Pay.Charge", q, runtime.QueryOptions{})
					r, _ := runtime.NewReconciler(rrt)
					st, err := r.RunOnce(context.Background())
					t.Logf("rec %+v %v", st, err)
				}
				got, err := runtime.Do(ctx, rt, call)
				if err != nil || got != "ok" || d.runs != 1 {
					t.Fatalf("dup: %q %v runs %d seen %q done %v", got, err, d.runs, d.seen, d.done)
				}
			})
		}
	}
}

type a29Limited struct {
	*memstore.Store
	limit int
}

func (s *a29Limited) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if len(p.Response)+len(p.Note) > s.limit {
		return 0, fmt.Errorf("limited: %w", runtime.ErrTooLarge)
	}
	return s.Store.Transition(ctx, p)
}

// A permanent failure too large for a store with a small limit: Do must
// return (bounded), and the duplicate must get a failure.
func TestReview29SizeRuleFailureBounded(t *testing.T) {
	for _, limit := range []int{1, 100, 200} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			rt, _ := runtime.New(&a29Limited{memstore.New(), limit}, runtime.WithCompletionTimeout(2*time.Second))
			call := runtime.Call[string, string]{Operation: "A.B", Key: "k1", Request: "r",
				Effect: func(ctx context.Context, req string) (string, error) {
					return "", runtime.Permanent(errors.New("declined: " + strings.Repeat("x", 5000)))
				}}
			done := make(chan error, 2)
			go func() {
				_, err := runtime.Do(context.Background(), rt, call)
				done <- err
				_, err = runtime.Do(context.Background(), rt, call)
				done <- err
			}()
			for i := 0; i < 2; i++ {
				select {
				case err := <-done:
					t.Logf("call %d: %v", i, err)
					if err == nil {
						t.Fatalf("failure turned into success")
					}
				case <-time.After(8 * time.Second):
					t.Fatalf("call %d hangs (limit %d)", i, limit)
				}
			}
		})
	}
}
