package pgstore_test

// Adversarial review of issue 17: DoTx encodes its request with the
// runtime's codec (json.Marshal of the value) while runtime.Do now encodes
// through a pointer where it believes the bytes are the same. One identity
// reached through both doors (README: "a runtime.Do call of a DoTx identity
// waits for the open transaction" and replays its outcome) must get one
// fingerprint.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// textTag has MarshalText on its value and MarshalJSON on its pointer (a
// time-like type with a pointer-receiver JSON form, as some libraries
// declare).
type textTag struct{ V string }

func (t textTag) MarshalText() ([]byte, error) { return []byte("text:" + t.V), nil }

func (t *textTag) MarshalJSON() ([]byte, error) { return []byte(`"json:` + t.V + `"`), nil }

type tagReq struct {
	Order string  `json:"order"`
	Tag   textTag `json:"tag"`
}

type plainTxReq struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

// Promise: a duplicate sent through runtime.Do of a call DoTx recorded
// replays its outcome, without running anything, and the reverse.
// Schedule: DoTx commits SUCCESS; runtime.Do with the same identity and
// request follows; then the other order (Do first, DoTx second). A plain
// request type holds; one with a value MarshalText and a pointer
// MarshalJSON is ErrKeyReused both ways.
func TestReview17DoTxThenDoSameFingerprint(t *testing.T) {
	t.Run("plain", func(t *testing.T) { doTxThenDo(t, plainTxReq{Order: "o-1", Cents: 5}) })
	t.Run("value MarshalText, pointer MarshalJSON", func(t *testing.T) { doTxThenDo(t, tagReq{Order: "o-1", Tag: textTag{V: "x"}}) })
}

func doTxThenDo[Req any](t *testing.T, req Req) {
	p := testPool(t)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	effect := func(context.Context, Req) (string, error) { runs.Add(1); return "ran", nil }
	txEffect := func(context.Context, pgx.Tx, Req) (string, error) { runs.Add(1); return "tx", nil }

	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[Req, string]{Operation: "R17.Tx", Key: "k1", Request: req, Effect: txEffect})
	if err != nil || got != "tx" {
		t.Fatalf("DoTx: %q %v", got, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = runtime.Do(ctx, rt, runtime.Call[Req, string]{Operation: "R17.Tx", Key: "k1", Request: req, Effect: effect})
	if err != nil || got != "tx" || runs.Load() != 1 {
		t.Errorf("Do after DoTx: %q, %v (runs %d); want DoTx's outcome replayed", got, err, runs.Load())
	}

	got, err = runtime.Do(ctx, rt, runtime.Call[Req, string]{Operation: "R17.Tx", Key: "k2", Request: req, Effect: effect})
	if err != nil || got != "ran" {
		t.Fatalf("Do: %q %v", got, err)
	}
	tx2, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx2.Rollback(ctx) }()
	got, err = pgstore.DoTx(ctx, rt, tx2, pgstore.TxCall[Req, string]{Operation: "R17.Tx", Key: "k2", Request: req, Effect: txEffect})
	if err != nil || got != "ran" || runs.Load() != 2 {
		t.Errorf("DoTx after Do: %q, %v (runs %d, ErrKeyReused: %v); want Do's outcome replayed", got, err, runs.Load(), errors.Is(err, runtime.ErrKeyReused))
	}
}

// Promise (DoTx): a duplicate "waits (a DoTx duplicate up to rt's MaxWait,
// then runtime.ErrInProgress) and replays the outcome"; nothing waits
// without bound. Schedule: one transaction calls DoTx twice with one key
// (an order with the same line twice, a retry loop inside the
// transaction), without and with group commit; the context allows 30s,
// MaxWait is 300ms. (README: the claim gives up after ten tries, about
// half a second, whatever MaxWait; 8s allows for a loaded machine.)
func TestReview17DoTxSameKeyTwiceInOneTx(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprint("group=", group), func(t *testing.T) {
			p := testPool(t)
			var opts []pgstore.Option
			if group {
				opts = append(opts, pgstore.WithGroupCommit(0))
			}
			rt, err := runtime.New(pgstore.New(p, opts...), runtime.WithMaxWait(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(scopedCtx(t.Name()), 30*time.Second)
			defer cancel()
			tx, err := p.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			var runs atomic.Int32
			call := pgstore.TxCall[plainTxReq, string]{Operation: "R17.Twice", Key: "k", Request: plainTxReq{Order: "o", Cents: 1},
				Effect: func(context.Context, pgx.Tx, plainTxReq) (string, error) { runs.Add(1); return "done", nil }}
			if got, err := pgstore.DoTx(ctx, rt, tx, call); err != nil || got != "done" {
				t.Fatalf("first DoTx: %q %v", got, err)
			}
			start := time.Now()
			got, err := pgstore.DoTx(ctx, rt, tx, call)
			took := time.Since(start)
			if took > 8*time.Second || runs.Load() != 1 {
				t.Fatalf("second DoTx of the key in the same transaction: %q, %v after %v (effect ran %d times); want ErrInProgress after about half a second",
					got, err, took.Round(time.Millisecond), runs.Load())
			}
			t.Logf("second DoTx: %q, %v after %v", got, err, took.Round(time.Millisecond))
		})
	}
}
