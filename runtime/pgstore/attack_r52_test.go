// Review r52: DoTx and errors the runtime flattens (cyclic, shared).

package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

var errR52Sentinel = errors.New("r52 sentinel")

// r52Cyc is a pointer error whose Unwrap leads back to itself through a
// Permanent mark; it carries a code.
type r52Cyc struct {
	next error
	code string
}

func (e *r52Cyc) Error() string     { return "r52 cyclic " + e.code }
func (e *r52Cyc) Unwrap() []error   { return []error{e.next, errR52Sentinel} }
func (e *r52Cyc) ErrorCode() string { return e.code }

// README "The state machine": an effect's error "that is cyclic, or shares a
// subtree, is flattened before anything else walks it ...: its message, and
// what errors.Is and errors.As find in it, are kept"; go doc DoTx: "A
// runtime.Permanent error is then recorded as FAILED ... and duplicates
// replay it"; FailedError's Code is "the error's Coder code".
func TestR52DoTxFlattenedPermanent(t *testing.T) {
	p := testPool(t)
	testenv.Within(t, 30*time.Second, func() {
		rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
		if err != nil {
			t.Error(err)
			return
		}
		ctx := scopedCtx(t.Name())
		ran := 0
		c := &r52Cyc{code: "r52_code"}
		c.next = runtime.Permanent(c)
		call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-52", Request: orderReq{"o-52", 5},
			Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
				ran++
				return order{}, c
			}}
		do := func() error {
			return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				_, err := pgstore.DoTx(ctx, rt, tx, call)
				return err
			})
		}
		first := do()
		second := do()
		t.Logf("first: %v\nsecond: %v\neffect runs: %d", first, second, ran)
		if first == nil || first.Error() != c.Error() {
			t.Errorf("first: %v, want the message %q", first, c.Error())
		}
		if !errors.Is(first, errR52Sentinel) || !errors.Is(first, runtime.ErrPermanent) {
			t.Errorf("errors.Is on DoTx's error: sentinel %v, ErrPermanent %v", errors.Is(first, errR52Sentinel), errors.Is(first, runtime.ErrPermanent))
		}
		var got *r52Cyc
		if !errors.As(first, &got) || got != c {
			t.Errorf("errors.As on DoTx's error: %v", got)
		}
		var fe *runtime.FailedError
		if !errors.As(second, &fe) || fe.Code != "r52_code" || fe.Message != c.Error() {
			t.Errorf("duplicate: %v (%+v), want a FailedError with code r52_code", second, fe)
		}
		if ran != 1 {
			t.Errorf("effect ran %d times", ran)
		}
	})
}
