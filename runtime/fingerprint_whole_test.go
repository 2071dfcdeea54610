package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// Request types whose JSON encoding leaves a part out.
type (
	fpCardReq struct {
		Amount int    `json:"amount"`
		Card   string `json:"-"` // kept out of stored records
	}
	fpHiddenReq struct {
		Amount int `json:"amount"`
		cents  int
	}
	fpShadowBase struct{ Note string }
	fpShadowReq  struct {
		fpShadowBase
		Note string // json encodes this Note only
	}
	fpIfaceReq struct {
		Detail any `json:"detail"`
	}
	// json encodes it as the time alone: time.Time's MarshalJSON is
	// promoted, and Amount is left out.
	fpTimedReq struct {
		time.Time
		Amount int
	}
)

// Promise: a key reused with another request is ErrKeyReused, whatever part
// of the request differs, including the parts JSON leaves out; the same
// request replays; the stored request still leaves out what JSON leaves
// out (the card number is not stored). Every store.
func TestFingerprintCoversWhatJSONSkips(t *testing.T) {
	reviewEach(t, func(t *testing.T, store runtime.Store) {
		rt, err := runtime.New(store, runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		type variant struct {
			name        string
			first, same any
			other       any
		}
		at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
		cases := []variant{
			{"json dash", fpCardReq{100, "4111111111111111"}, fpCardReq{100, "4111111111111111"}, fpCardReq{100, "5500000000000004"}},
			{"unexported", fpHiddenReq{1, 100}, fpHiddenReq{1, 100}, fpHiddenReq{1, 999999}},
			{"shadowed", fpShadowReq{fpShadowBase{"a"}, "x"}, fpShadowReq{fpShadowBase{"a"}, "x"}, fpShadowReq{fpShadowBase{"b"}, "x"}},
			{"interface", fpIfaceReq{fpHiddenReq{1, 100}}, fpIfaceReq{fpHiddenReq{1, 100}}, fpIfaceReq{fpHiddenReq{1, 999999}}},
			{"embedded time", fpTimedReq{at, 100}, fpTimedReq{at, 100}, fpTimedReq{at, 999999}},
		}
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := reviewCtx()
				var runs atomic.Int32
				call := func(req any) (string, error) {
					return runtime.Do(ctx, rt, runtime.Call[any, string]{Operation: "Fp.Whole", Key: "k" + string(rune('a'+i)), Request: req,
						Effect: func(ctx context.Context, r any) (string, error) {
							return "receipt-" + string(rune('0'+runs.Add(1))), nil
						}})
				}
				first, err := call(tc.first)
				if err != nil {
					t.Fatal(err)
				}
				if again, err := call(tc.same); err != nil || again != first {
					t.Fatalf("same request: %q, %v; want the replay %q", again, err, first)
				}
				if got, err := call(tc.other); !errors.Is(err, runtime.ErrKeyReused) {
					t.Fatalf("other request under the same key: %q, %v; want ErrKeyReused", got, err)
				}
				if n := runs.Load(); n != 1 {
					t.Fatalf("effect ran %d times, want 1", n)
				}
			})
		}
		t.Run("card not stored", func(t *testing.T) {
			ctx := reviewCtx()
			_, err := runtime.Do(ctx, rt, runtime.Call[fpCardReq, string]{Operation: "Fp.Card", Key: "k", Request: fpCardReq{100, "4111111111111111"},
				Effect: func(ctx context.Context, r fpCardReq) (string, error) { return "ok", nil }})
			if err != nil {
				t.Fatal(err)
			}
			id, err := runtime.NewIdentity(ctx, "Fp.Card", "k")
			if err != nil {
				t.Fatal(err)
			}
			rec, err := store.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(rec.Request), "4111") || string(rec.Request) != `{"amount":100}` {
				t.Fatalf("stored request %s; want {\"amount\":100}", rec.Request)
			}
		})
	})
}

// A request part no fingerprint can compare is refused before any claim,
// with the field's name.
func TestFingerprintRefusesFuncField(t *testing.T) {
	type withFunc struct {
		Amount int
		notify func()
	}
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = runtime.Do(ctx, rt, runtime.Call[withFunc, string]{Operation: "Fp.Func", Key: "k", Request: withFunc{1, func() {}},
		Effect: func(ctx context.Context, r withFunc) (string, error) { t.Fatal("effect ran"); return "", nil }})
	if !errors.Is(err, runtime.ErrNotComparable) || !strings.Contains(err.Error(), "field notify (func())") {
		t.Fatalf("got %v; want ErrNotComparable naming field notify", err)
	}
	// nil is comparable.
	if _, err := runtime.Do(ctx, rt, runtime.Call[withFunc, string]{Operation: "Fp.Func", Key: "k2", Request: withFunc{Amount: 1},
		Effect: func(ctx context.Context, r withFunc) (string, error) { return "ok", nil }}); err != nil {
		t.Fatal(err)
	}
}
