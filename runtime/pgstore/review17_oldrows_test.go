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

// Promise: Get and a refused claim return the row as PostgreSQL holds it,
// every column (the replay path now reads with its own SELECT). Schedule:
// rows in every state with every column set (a takeover count, reconcile
// attempts, a token, a note, an omitted response), read back three ways:
// a raw SELECT, Get, and a claim that is refused; with and without group
// commit.
func TestReview17ReadMatchesRow(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprint("group=", group), func(t *testing.T) {
			p := testPool(t)
			var opts []pgstore.Option
			if group {
				opts = append(opts, pgstore.WithGroupCommit(0))
			}
			s := pgstore.New(p, opts...)
			ctx := context.Background()
			scope := fmt.Sprintf("r17-read/%d", time.Now().UnixNano())
			rows := []struct {
				key, state, owner, token, note string
				lease, expires                 any
				takeovers, attempts            int
				response                       []byte
				omitted                        bool
			}{
				{"p", "PROCESSING", "w1", "", "", time.Now().Add(time.Hour), nil, 3, 0, nil, false},
				{"s", "SUCCESS", "", "tok-s", "", nil, time.Now().Add(time.Hour), 1, 0, []byte(`{"ok":1}`), false},
				{"o", "SUCCESS", "", "tok-o", "response not stored: 2 MiB", nil, time.Now().Add(time.Hour), 0, 0, nil, true},
				{"f", "FAILED", "", "tok-f", "", nil, time.Now().Add(time.Hour), 0, 2, []byte(`{"message":"no"}`), false},
				{"u", "UNKNOWN", "", "tok-u", "timed out", nil, nil, 2, 5, nil, false},
				{"h", "UNKNOWN", "rec", "", "", time.Now().Add(time.Hour), nil, 0, 1, nil, false},
			}
			for _, r := range rows {
				if _, err := p.Exec(ctx, `INSERT INTO idem_records (scope, operation, key, fingerprint, state, owner, version, lease_expires_at, expires_at,
					request, response, takeovers, attempts, created_at, updated_at, token, note, response_omitted)
					VALUES ($1, 'R17.Read', $2, '\x0102', $3, $4, nextval('idem_records_version_seq'), $5, $6, '{"r":1}', $7, $8, $9,
					clock_timestamp() - interval '1 minute', clock_timestamp(), $10, $11, $12)`,
					scope, r.key, r.state, r.owner, r.lease, r.expires, r.response, r.takeovers, r.attempts, r.token, r.note, r.omitted); err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range rows {
				id := runtime.Identity{Scope: scope, Operation: "R17.Read", Key: r.key}
				var want runtime.Record
				var lease, expires *time.Time
				if err := p.QueryRow(ctx, `SELECT fingerprint, state, owner, version, lease_expires_at, expires_at, request, response, takeovers, attempts,
					created_at, updated_at, token, note, response_omitted FROM idem_records WHERE scope = $1 AND operation = 'R17.Read' AND key = $2`, scope, r.key).Scan(
					&want.Fingerprint, &want.State, &want.Owner, &want.Version, &lease, &expires, &want.Request, &want.Response, &want.Takeovers, &want.Attempts,
					&want.CreatedAt, &want.UpdatedAt, &want.Token, &want.Note, &want.ResponseOmitted); err != nil {
					t.Fatal(err)
				}
				want.ID = id
				if lease != nil {
					want.LeaseExpiresAt = *lease
				}
				if expires != nil {
					want.ExpiresAt = *expires
				}
				got, err := s.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: []byte("other"), Owner: "dup", Lease: time.Minute})
				if err != nil || res.Claimed {
					t.Fatalf("%s: refused claim: %+v %v", r.key, res, err)
				}
				for how, rec := range map[string]runtime.Record{"Get": got, "Claim": res.Record} {
					if rec.StoreNow.IsZero() {
						t.Errorf("%s via %s: no StoreNow", r.key, how)
					}
					rec.StoreNow = time.Time{}
					for _, tm := range []*time.Time{&rec.LeaseExpiresAt, &rec.ExpiresAt, &rec.CreatedAt, &rec.UpdatedAt, &want.LeaseExpiresAt, &want.ExpiresAt, &want.CreatedAt, &want.UpdatedAt} {
						if !tm.IsZero() {
							*tm = tm.UTC()
						}
					}
					if fmt.Sprintf("%+v", rec) != fmt.Sprintf("%+v", want) {
						t.Errorf("%s via %s:\n got %+v\nwant %+v", r.key, how, rec, want)
					}
				}
			}
		})
	}
}
