// Review r48: DoTx and a timeout among non-comparable value errors.

package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r48APIError: a downstream API's error as a value type (a slice field, so
// not comparable) whose Timeout() is true for a 504.
type r48APIError struct {
	Status  int
	Details []string
}

func (e r48APIError) Error() string { return fmt.Sprintf("api: status %d", e.Status) }
func (e r48APIError) Timeout() bool { return e.Status == 504 }

// README, state machine: "A timeout anywhere in the error tree (...) [is]
// UNKNOWN under every error policy and whatever Permanent or Retryable
// says: never FAILED ... "Anywhere" is every error of the tree, however
// wide (an errors.Join of a thousand downstream errors) ... One function
// decides (...), and runtime.Do, the HTTP and gRPC adapters, generated
// wrappers and pgstore.DoTx all follow it."
//
// Schedule: a DoTx effect calls two downstream items, one refused (400),
// one gateway timeout (504), and returns Permanent of their join (both
// errors with nil Details). DoTx records FAILED: the duplicate is told a
// permanent failure.
func TestR48DoTxJoinedValueTimeoutRecordedFailed(t *testing.T) {
	p := testPool(t)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	ran := 0
	call := pgstore.TxCall[orderReq, order]{Operation: "Orders.Create", Key: "o-48", Request: orderReq{"o-48", 5},
		Effect: func(ectx context.Context, tx pgx.Tx, r orderReq) (order, error) {
			ran++
			return order{}, runtime.Permanent(fmt.Errorf("paying two items: %w",
				errors.Join(r48APIError{Status: 400}, r48APIError{Status: 504})))
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
}
