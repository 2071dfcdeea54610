package pgstore_test

// Adversarial review of issue 17: the claim statement (and its replay path)
// and group commit were rewritten. Rows written by earlier versions of
// pgstore, with only the columns they knew (no token, note or
// response_omitted; a request NULL; created and updated set by defaults),
// must still replay as they did, on every claim path.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

type oldReq struct {
	Account string `json:"account"`
	Cents   int    `json:"cents"`
}

type oldReceipt struct {
	ChargeID string `json:"charge_id"`
}

// Promise: a record written by the previous version replays its outcome
// (SUCCESS: the stored response; FAILED: the failure, with its code;
// UNKNOWN: ErrOutcomeUnknown) without running the effect, through
// runtime.Do and DoTx, without and with group commit; a PROCESSING row
// whose lease expired is taken over once. Schedule: rows inserted with the
// columns of the first schema only, then duplicates.
func TestReview17OldRowsReplay(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprint("group=", group), func(t *testing.T) {
			p := testPool(t)
			var opts []pgstore.Option
			if group {
				opts = append(opts, pgstore.WithGroupCommit(0))
			}
			rt, err := runtime.New(pgstore.New(p, opts...), runtime.WithMaxWait(0))
			if err != nil {
				t.Fatal(err)
			}
			scope := fmt.Sprintf("r17-old/%d", time.Now().UnixNano())
			ctx := runtime.WithScope(context.Background(), scope)
			req := oldReq{Account: "acct", Cents: 100}
			reqBytes, _ := json.Marshal(req)
			fp := sha256.Sum256(reqBytes)
			insert := func(key, state string, response []byte, lease, expires any) {
				t.Helper()
				// The columns of the first schema only; the version from the
				// sequence, as every writer draws it.
				if _, err := p.Exec(ctx, `INSERT INTO idem_records (scope, operation, key, fingerprint, state, owner, version, lease_expires_at, expires_at, request, response)
					VALUES ($1, 'Old.Charge', $2, $3, $4, $5, nextval('idem_records_version_seq'), $6, $7, $8, $9)`,
					scope, key, fp[:], state, map[bool]string{true: "old-worker", false: ""}[state == "PROCESSING"], lease, expires, nil, response); err != nil {
					t.Fatal(err)
				}
			}
			hour := time.Now().Add(time.Hour)
			insert("success", "SUCCESS", []byte(`{"charge_id":"ch_old"}`), nil, hour)
			insert("failed", "FAILED", []byte(`{"code":"card_declined","message":"declined"}`), nil, hour)
			insert("failed-plain", "FAILED", []byte(`{"message":"declined"}`), nil, hour)
			insert("unknown", "UNKNOWN", nil, nil, nil)
			insert("expired", "PROCESSING", nil, time.Now().Add(-time.Minute), nil)

			var runs atomic.Int32
			effect := func(context.Context, oldReq) (oldReceipt, error) { runs.Add(1); return oldReceipt{"ch_new"}, nil }
			do := func(key string) (oldReceipt, error) {
				return runtime.Do(ctx, rt, runtime.Call[oldReq, oldReceipt]{Operation: "Old.Charge", Key: key, Request: req, Effect: effect})
			}
			doTx := func(key string) (oldReceipt, error) {
				tx, err := p.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback(ctx) }()
				return pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[oldReq, oldReceipt]{Operation: "Old.Charge", Key: key, Request: req,
					Effect: func(ctx context.Context, _ pgx.Tx, r oldReq) (oldReceipt, error) { return effect(ctx, r) }})
			}
			for name, door := range map[string]func(string) (oldReceipt, error){"Do": do, "DoTx": doTx} {
				for range 3 {
					if got, err := door("success"); err != nil || got.ChargeID != "ch_old" {
						t.Errorf("%s success: %+v, %v", name, got, err)
					}
					var fe *runtime.FailedError
					if _, err := door("failed"); !errors.As(err, &fe) || fe.Code != "card_declined" {
						t.Errorf("%s failed: %v, want the stored failure with its code", name, err)
					}
					if _, err := door("failed-plain"); !errors.As(err, &fe) {
						t.Errorf("%s failed without a code: %v", name, err)
					}
					if _, err := door("unknown"); !errors.Is(err, runtime.ErrOutcomeUnknown) {
						t.Errorf("%s unknown: %v, want ErrOutcomeUnknown", name, err)
					}
				}
			}
			if n := runs.Load(); n != 0 {
				t.Fatalf("the effect ran %d times for old finished records", n)
			}
			if got, err := do("expired"); err != nil || got.ChargeID != "ch_new" || runs.Load() != 1 {
				t.Fatalf("old PROCESSING row with an expired lease: %+v, %v, runs %d; want one takeover", got, err, runs.Load())
			}
			if got, err := do("expired"); err != nil || got.ChargeID != "ch_new" || runs.Load() != 1 {
				t.Fatalf("after the takeover: %+v, %v, runs %d", got, err, runs.Load())
			}
		})
	}
}
