package runtime_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	idem "github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r52Str holds a string; two of them hold equal bytes at two addresses.
type r52Str struct{ S string }

var r52Target string

func (e r52Str) Error() string { return "r52 str " + e.S }
func (e r52Str) Timeout() bool { return unsafe.StringData(e.S) == unsafe.StringData(r52Target) }

// Review r52's observation O1, now the README's rule: a string is told by
// its bytes, wherever they are ("a string by its bytes, wherever they
// are"): two values whose strings differ only by address are one error,
// which only unsafe code can tell apart.
func TestR52StringAddress(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		a := r52Str{strings.Repeat("x", 8)}
		r52Target = strings.Repeat("x", 8)
		b := r52Str{r52Target}
		if idem.IsTimeout(a) || !idem.IsTimeout(b) {
			t.Fatalf("control")
		}
		if idem.IsTimeout(errors.Join(a, b)) {
			t.Errorf("IsTimeout(Join(a, b)) = true: b, equal to a by its bytes, was read as an error of its own")
		}
		c := r52Str{"y" + strings.Repeat("x", 7)}
		if !idem.IsTimeout(errors.Join(c, b)) {
			t.Errorf("IsTimeout(Join(c, b)) = false: strings with other bytes were taken for one")
		}
	})
}

// r52AnyCycle holds a float32 NaN in an interface and unwraps to itself.
type r52AnyCycle struct{ X any }

func (e r52AnyCycle) Error() string { return "r52 any cycle" }
func (e r52AnyCycle) Unwrap() error { return e }

// r52F64Cycle holds a float64 NaN in an interface and unwraps to itself.
type r52F64Cycle struct{ X any }

func (e r52F64Cycle) Error() string { return "r52 f64 cycle" }
func (e r52F64Cycle) Unwrap() error { return e }

// README: "its scalars bit for bit (a NaN ends a cycle ...)"; "nor is one
// holding a float32 NaN in an interface".
func TestR52NaNInInterfaceCycle(t *testing.T) {
	testenv.Within(t, 60*time.Second, func() {
		rt, err := idem.New(memstore.New())
		if err != nil {
			t.Fatal(err)
		}
		f32 := r52AnyCycle{X: math.Float32frombits(0x7fc00001)}
		f64 := r52F64Cycle{X: math.Float64frombits(0x7ff8000000000001)}
		// README: such a value "is read until the walk's bound, and is
		// uncertain" (review r52's observation O2).
		if st := rt.Classify(idem.Permanent(f32)); st != idem.StateUnknown {
			t.Errorf("Classify(Permanent(float32 NaN in interface, self-cycle)) = %q, want UNKNOWN (read to the bound)", st)
		}
		if st := rt.Classify(idem.Permanent(f64)); st != idem.StateFailed {
			t.Errorf("Classify(Permanent(float64 NaN in interface, self-cycle)) = %q, want FAILED", st)
		}
	})
}

// README "What exactly once means here": "With a Query, and a downstream
// that takes the attempt's FencingToken (on effects and queries) and
// refuses tokens lower than one it has seen, the effect happens at most
// once per identity"; the lease rule: "After a query says 'did not
// happen', the effect runs only after a CAS to a new version: a worker
// whose record was taken over during its query never runs it".
//
// Setup: two runtimes of one process on one store value (docs/http.md:
// "one runtime, or runtimes on one store value"), each given the process's
// owner (WithOwner then said "It must be unique per process"). Write
// tokens were owner#counter, the counter per runtime, so both runtimes'
// first tokens were "pod-a#1"; they now carry a random part per runtime
// (WithOwner: "Runtimes may share one").
//
// Schedule: an UNKNOWN record; rt2 (its renewals unanswered) takes it and
// asks its query, which is slow; rt2's lease expires; rt3 takes the record,
// its query says "did not happen", it moves the record to PROCESSING
// (token pod-a#1) and runs the effect; rt2's query then says "did not
// happen" too, and rt2's CAS from its own version (token pod-a#1) fails,
// but is taken for its own write: rt2 runs the effect beside rt3's, with
// the same fencing token.
func TestR52SharedOwnerTwoEffectsOneFencingToken(t *testing.T) {
	for _, st := range teststores.All() {
		for _, owner2 := range []string{"pod-a", "pod-a2 (control)"} {
			t.Run(st.Name+"/"+owner2, func(t *testing.T) {
				s := st.New(t)
				testenv.Within(t, 20*time.Second, func() {
					ctx := context.Background()
					key := "k-r52-fence-" + teststores.Unique()
					type effect struct {
						who   string
						token int64
					}
					var mu sync.Mutex
					var effects []effect
					ran := func(ctx context.Context, who string) {
						tok, _ := idem.FencingToken(ctx)
						mu.Lock()
						effects = append(effects, effect{who, tok})
						mu.Unlock()
					}
					seed, err := idem.New(s, idem.WithOwner("seed"))
					if err != nil {
						t.Error(err)
						return
					}
					_, err = idem.Do(ctx, seed, idem.Call[string, string]{Operation: "R52.Fence", Key: key, Request: "r",
						Effect: func(context.Context, string) (string, error) { return "", context.DeadlineExceeded }})
					if !errors.Is(err, idem.ErrOutcomeUnknown) {
						t.Errorf("seed: %v", err)
						return
					}
					rt2, err := idem.New(teststores.NoRenewals{Store: s}, idem.WithOwner(strings.Fields(owner2)[0]), idem.WithLease(300*time.Millisecond), idem.WithMaxWait(0))
					if err != nil {
						t.Error(err)
						return
					}
					rt3, err := idem.New(s, idem.WithOwner("pod-a"), idem.WithLease(5*time.Second), idem.WithMaxWait(0))
					if err != nil {
						t.Error(err)
						return
					}
					querying2, go2, running3, release3 := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
					var once2 sync.Once
					done2 := make(chan error, 1)
					go func() {
						_, err := idem.Do(ctx, rt2, idem.Call[string, string]{Operation: "R52.Fence", Key: key, Request: "r",
							Query: func(ctx context.Context, _ string) (string, idem.Outcome, error) {
								once2.Do(func() { close(querying2) })
								<-go2
								return "", idem.OutcomeNotHappened, nil
							},
							Effect: func(ctx context.Context, _ string) (string, error) {
								ran(ctx, "rt2")
								return "two", nil
							}})
						done2 <- err
					}()
					<-querying2
					time.Sleep(500 * time.Millisecond) // rt2's lease (300 ms, never renewed) expires
					done3 := make(chan error, 1)
					go func() {
						_, err := idem.Do(ctx, rt3, idem.Call[string, string]{Operation: "R52.Fence", Key: key, Request: "r",
							Query: func(ctx context.Context, _ string) (string, idem.Outcome, error) {
								return "", idem.OutcomeNotHappened, nil
							},
							Effect: func(ctx context.Context, _ string) (string, error) {
								ran(ctx, "rt3")
								close(running3)
								<-release3
								return "three", nil
							}})
						done3 <- err
					}()
					select {
					case <-running3:
					case err := <-done3:
						t.Errorf("schedule not reached: rt3 did not run the effect: %v", err)
						close(go2)
						<-done2
						return
					}
					close(go2)
					err2 := <-done2
					close(release3)
					err3 := <-done3
					replay, rerr := idem.Do(ctx, rt3, idem.Call[string, string]{Operation: "R52.Fence", Key: key, Request: "r",
						Effect: func(ctx context.Context, _ string) (string, error) { ran(ctx, "dup"); return "dup", nil }})
					mu.Lock()
					defer mu.Unlock()
					t.Logf("rt2: %v; rt3: %v; a later duplicate gets %q, %v; effects: %+v", err2, err3, replay, rerr, effects)
					if len(effects) != 1 {
						t.Errorf("the effect ran %d times (%+v), want once: rt2's record was taken over during its query", len(effects), effects)
					}
				})
			})
		}
	}
}
