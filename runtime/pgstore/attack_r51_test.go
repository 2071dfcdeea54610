// Review r51: DoTx and a timeout in a value error told from another only by
// float32 NaN bits.

package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

type r51F32 struct{ F float32 }

func (e r51F32) Error() string { return fmt.Sprintf("r51 f32 %#x", math.Float32bits(e.F)) }
func (e r51F32) Timeout() bool { return math.Float32bits(e.F) == 0x7fc00001 }

// go doc pgstore.DoTx: "A runtime.Permanent error is then recorded as FAILED
// (unless a timeout or a cancellation is in its tree, runtime.Uncertain:
// that is never a permanent failure)"; README: "Each error is told by its
// identity: ... a value by its type, the references it holds and its
// scalars bit for bit".
func TestR51DoTxFloat32NaNTimeoutRecordedFailed(t *testing.T) {
	p := testPool(t)
	testenv.Within(t, 30*time.Second, func() {
		rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
		if err != nil {
			t.Error(err)
			return
		}
		ctx := scopedCtx(t.Name())
		ran := 0
		a := r51F32{math.Float32frombits(0x7f800001)}
		b := r51F32{math.Float32frombits(0x7fc00001)} // timed out
		call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-51", Request: orderReq{"o-51", 5},
			Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
				ran++
				return order{}, runtime.Permanent(errors.Join(a, b))
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
		var fe *runtime.FailedError
		if errors.As(second, &fe) {
			t.Errorf("a timeout in the tree was recorded FAILED by DoTx; the duplicate got %v", second)
		}
	})
}
