package pgstore_test

// Review r22 (DoTx): code of the caller's between a call's steps, and the
// transaction's own outcomes.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r22Ledger creates a schema of its own with a ledger table for one test
// and returns the table's qualified name.
func r22Ledger(t *testing.T, p *pgxpool.Pool) string {
	t.Helper()
	schema := fmt.Sprintf("r22_%d", time.Now().UnixNano())
	ctx := context.Background()
	if _, err := p.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "CREATE TABLE "+schema+".ledger (key text NOT NULL, n int NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	return schema + ".ledger"
}

// r22RunG runs f on a goroutine of its own and reports how it ended.
func r22RunG(f func()) (how string, v any) {
	done := make(chan struct{})
	go func() {
		returned := false
		defer func() {
			if returned {
				how = "returned"
			} else if v = recover(); v != nil {
				how = "panicked"
				if os.Getenv("R22_STACK") != "" {
					fmt.Fprintf(os.Stderr, "%s\n", debug.Stack())
				}
			} else {
				how = "goexit"
			}
			close(done)
		}()
		f()
		returned = true
	}()
	<-done
	return how, v
}

// r22RawLease reads the record's stored lease expiry (Get reports a claim
// naming an ended transaction as expired: LEAST(lease, now)).
func r22RawLease(t *testing.T, p *pgxpool.Pool, id runtime.Identity) (time.Time, string) {
	t.Helper()
	var at *time.Time // NULL on a final record
	var state string
	err := p.QueryRow(context.Background(), "SELECT lease_expires_at, state FROM idem_records WHERE scope = $1 AND operation = $2 AND key = $3",
		id.Scope, id.Operation, id.Key).Scan(&at, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	if at == nil {
		return time.Time{}, state
	}
	return *at, state
}

// TestR22DoTxGoexitDeferredCommit: an effect that calls runtime.Goexit
// (t.FailNow, require.* in a test's effect) inside DoTx, whose caller
// commits in a deferred function when its named error is nil (a common
// pattern). DoTx neither returns nor panics, so its savepoint is never
// rolled back: the effect's row commits without its SUCCESS record, the
// claim (PROCESSING, naming a committed transaction) is taken over at once,
// and the duplicate runs the effect again: two committed effects for one
// key.
func TestR22DoTxGoexitDeferredCommit(t *testing.T) {
	p := testPool(t)
	ledger := r22Ledger(t, p)
	rt, err := runtime.New(pgstore.New(p), runtime.WithLease(time.Second), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	goexit := true
	call := pgstore.TxCall[string, int]{Operation: "R22.Goexit", Key: "k1", Request: "req",
		Effect: func(ctx context.Context, tx pgx.Tx, req string) (int, error) {
			runs.Add(1)
			if _, err := tx.Exec(ctx, "INSERT INTO "+ledger+" (key) VALUES ($1)", "k1"); err != nil {
				return 0, err
			}
			if goexit {
				goruntime.Goexit()
			}
			return 1, nil
		}}
	first := func() (err error) {
		tx, err := p.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() {
			if err == nil {
				err = tx.Commit(context.Background())
			} else {
				_ = tx.Rollback(context.Background())
			}
		}()
		_, err = pgstore.DoTx(ctx, rt, tx, call)
		return err
	}
	how, v := r22RunG(func() { _ = first() })
	t.Logf("first call: %s (%v)", how, v)
	goexit = false

	// A duplicate, later.
	time.Sleep(100 * time.Millisecond)
	var dupErr error
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, dupErr = pgstore.DoTx(ctx, rt, tx, call)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := count(t, p, "SELECT count(*) FROM "+ledger+" WHERE key = $1", "k1")
	t.Logf("duplicate: %v; effect runs %d; committed rows %d", dupErr, runs.Load(), rows)
	if rows > 1 {
		t.Errorf("%d committed effects for one key (the first call Goexit-ed in its effect; its caller committed in a defer)", rows)
	}
}

// TestR22DoTxGoexitRenewals: after an effect inside DoTx Goexit-ed and its
// caller rolled back, the claim's renewals go on (the heartbeat is never
// stopped): the record stays PROCESSING with a lease renewed long after
// the call is gone.
func TestR22DoTxGoexitRenewals(t *testing.T) {
	p := testPool(t)
	ledger := r22Ledger(t, p)
	const lease = 600 * time.Millisecond
	store := pgstore.New(p)
	rt, err := runtime.New(store, runtime.WithLease(lease), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	call := pgstore.TxCall[string, int]{Operation: "R22.GoexitRenew", Key: "k1", Request: "req",
		Effect: func(ctx context.Context, tx pgx.Tx, req string) (int, error) {
			if _, err := tx.Exec(ctx, "INSERT INTO "+ledger+" (key) VALUES ($1)", "k1"); err != nil {
				return 0, err
			}
			goruntime.Goexit()
			return 1, nil
		}}
	how, _ := r22RunG(func() {
		_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := pgstore.DoTx(ctx, rt, tx, call)
			return err
		})
	})
	t.Logf("first call: %s", how)
	id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "R22.GoexitRenew", Key: "k1"}
	first, st1 := r22RawLease(t, p, id)
	time.Sleep(4 * lease)
	later, st2 := r22RawLease(t, p, id)
	t.Logf("stored lease %v (%s), %v later %v (%s)", first, st1, 4*lease, later, st2)
	if st2 == "PROCESSING" && later.After(first) {
		t.Errorf("the claim's lease was renewed after the call was gone: %v then %v", first, later)
	}
}

// TestR22OwnOutcomePastTTL: outcomes a transaction wrote itself are
// replayed to it past their TTL, through nested savepoints (released), the
// size rule (a smaller SUCCESS written) and group commit; the effect runs
// once.
func TestR22OwnOutcomePastTTL(t *testing.T) {
	p := testPool(t)
	ledger := r22Ledger(t, p)
	for _, tc := range []struct {
		name  string
		opts  []pgstore.Option
		big   bool
		outer bool // second call on the outer savepoint (else on tx)
	}{
		{"nested savepoints released", nil, false, true},
		{"size rule, response omitted", []pgstore.Option{pgstore.WithMaxRecordBytes(4096)}, true, true},
		{"group commit, size rule", []pgstore.Option{pgstore.WithGroupCommit(8), pgstore.WithMaxRecordBytes(4096)}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := runtime.New(pgstore.New(p, tc.opts...), runtime.WithLease(2*time.Second), runtime.WithMaxWait(3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			var runs atomic.Int32
			resp := "ok"
			if tc.big {
				resp = string(make([]byte, 8192))
			}
			call := pgstore.TxCall[string, string]{Operation: "R22.Own", Key: "k", Request: "req", TTL: 50 * time.Millisecond,
				Effect: func(ctx context.Context, tx pgx.Tx, req string) (string, error) {
					runs.Add(1)
					_, err := tx.Exec(ctx, "INSERT INTO "+ledger+" (key) VALUES ($1)", t.Name())
					return resp, err
				}}
			var first, second error
			err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				sa, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				sb, err := sa.Begin(ctx)
				if err != nil {
					return err
				}
				_, first = pgstore.DoTx(ctx, rt, sb, call)
				if err := sb.Commit(ctx); err != nil { // RELEASE
					return err
				}
				time.Sleep(300 * time.Millisecond) // past the TTL
				on := tx
				if tc.outer {
					on = sa
				}
				start := time.Now()
				_, second = pgstore.DoTx(ctx, rt, on, call)
				t.Logf("second call: %v after %v", second, time.Since(start).Round(time.Millisecond))
				return sa.Commit(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}
			if first != nil {
				t.Fatalf("first: %v", first)
			}
			if tc.big && !errors.Is(second, runtime.ErrNotReplayable) || !tc.big && second != nil {
				t.Errorf("second call in the same transaction: %v", second)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("effect ran %d times", n)
			}
			if n := count(t, p, "SELECT count(*) FROM "+ledger+" WHERE key = $1", t.Name()); n != 1 {
				t.Errorf("%d committed rows", n)
			}
		})
	}
}

// r22PanicHandler is a slog.Handler that panics on every record.
type r22PanicHandler struct{}

func (r22PanicHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (r22PanicHandler) Handle(context.Context, slog.Record) error { panic("r22PanicHandler.Handle") }
func (h r22PanicHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h r22PanicHandler) WithGroup(string) slog.Handler           { return h }

// TestR22DoTxLoggerPanicAfterTakeover: a claim naming a transaction that
// rolled back is taken over at once; the runtime then logs the takeover,
// and the logger panics. DoTx panics through between the claim and
// Begin: the new claim names no transaction and nothing renews it, but its
// lease is live, so the key is held for the whole lease by a call that is
// gone: a retry in the same transaction (the caller recovered) waits
// MaxWait and gets ErrInProgress, as does a duplicate in another one.
func TestR22DoTxLoggerPanicAfterTakeover(t *testing.T) {
	p := testPool(t)
	ledger := r22Ledger(t, p)
	const lease = 5 * time.Second
	store := pgstore.New(p)
	rt, err := runtime.New(store, runtime.WithLease(lease), runtime.WithMaxWait(time.Second),
		runtime.WithLogger(slog.New(r22PanicHandler{})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	var runs atomic.Int32
	call := pgstore.TxCall[string, int]{Operation: "R22.LogTakeover", Key: "k", Request: "req",
		Effect: func(ctx context.Context, tx pgx.Tx, req string) (int, error) {
			runs.Add(1)
			_, err := tx.Exec(ctx, "INSERT INTO "+ledger+" (key) VALUES ($1)", "k")
			return 1, err
		}}
	// The first call succeeds; its transaction rolls back.
	tx0, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.DoTx(ctx, rt, tx0, call); err != nil {
		t.Fatal(err)
	}
	_ = tx0.Rollback(ctx)

	var retry error
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		how, v := r22RunG(func() { _, _ = pgstore.DoTx(ctx, rt, tx, call) })
		t.Logf("second call (takes the rolled-back claim over): %s (%v)", how, v)
		start := time.Now()
		_, retry = pgstore.DoTx(ctx, rt, tx, call)
		t.Logf("retry in the same transaction: %v after %v", retry, time.Since(start).Round(time.Millisecond))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if errors.Is(retry, runtime.ErrInProgress) {
		t.Errorf("retry after the caller recovered the logger's panic: %v", retry)
	}
	var dup error
	_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, dup = pgstore.DoTx(ctx, rt, tx, call)
		return nil
	})
	t.Logf("duplicate in another transaction: %v; effect runs %d", dup, runs.Load())
	if errors.Is(dup, runtime.ErrInProgress) {
		t.Errorf("duplicate in another transaction, after every call ended: %v", dup)
	}
}

// r22CutResp is a response whose short form (Cut) panics.
type r22CutResp struct {
	Body string `json:"body"`
}

func (r *r22CutResp) Cut() r22CutResp { panic("r22CutResp.Cut") }

// r22PanicErr is an error whose Error method panics.
type r22PanicErr struct{}

func (*r22PanicErr) Error() string { panic("r22PanicErr.Error") }

// TestR22DoTxPanicsRecoveredCommit: caller code panics between DoTx's
// steps; the caller recovers and commits; a duplicate follows. At most
// one committed effect, and the claim is not renewed after the call.
func TestR22DoTxPanicsRecoveredCommit(t *testing.T) {
	p := testPool(t)
	ledger := r22Ledger(t, p)
	big := fmt.Sprintf("%09000d", 1)
	for _, tc := range []struct {
		name   string
		sopts  []pgstore.Option
		ropts  []runtime.Option
		effect func() (r22CutResp, error)
	}{
		{"permanent error whose Error panics", nil, nil, func() (r22CutResp, error) {
			return r22CutResp{}, runtime.Permanent((*r22PanicErr)(nil))
		}},
		{"observer and logger panic after the effect", nil, []runtime.Option{
			runtime.WithObserver(runtime.ObserverFunc(func(_ context.Context, e runtime.Event) {
				if e.Kind == runtime.EventPhase && e.Phase == runtime.PhaseEffect {
					panic("observer")
				}
			})),
			runtime.WithLogger(slog.New(r22PanicHandler{})),
		}, func() (r22CutResp, error) { return r22CutResp{Body: "ok"}, nil }},
		{"response too large, Cut panics", []pgstore.Option{pgstore.WithMaxRecordBytes(4096)}, nil, func() (r22CutResp, error) {
			return r22CutResp{Body: big}, nil
		}},
		{"response too large, Cut panics, group commit", []pgstore.Option{pgstore.WithMaxRecordBytes(4096), pgstore.WithGroupCommit(4)}, nil, func() (r22CutResp, error) {
			return r22CutResp{Body: big}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const lease = 600 * time.Millisecond
			store := pgstore.New(p, tc.sopts...)
			rt, err := runtime.New(store, append([]runtime.Option{runtime.WithLease(lease), runtime.WithMaxWait(2 * time.Second)}, tc.ropts...)...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := scopedCtx(t.Name())
			key := fmt.Sprintf("%d", time.Now().UnixNano())
			var runs atomic.Int32
			first := true
			call := pgstore.TxCall[string, r22CutResp]{Operation: "R22.PanicCommit", Key: key, Request: "req",
				Effect: func(ctx context.Context, tx pgx.Tx, req string) (r22CutResp, error) {
					runs.Add(1)
					if _, err := tx.Exec(ctx, "INSERT INTO "+ledger+" (key) VALUES ($1)", key); err != nil {
						return r22CutResp{}, err
					}
					if first {
						first = false
						return tc.effect()
					}
					return r22CutResp{Body: "second"}, nil
				}}
			err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				how, v := r22RunG(func() { _, _ = pgstore.DoTx(ctx, rt, tx, call) })
				t.Logf("first call: %s (%v)", how, v)
				return nil // commit
			})
			if err != nil {
				t.Fatal(err)
			}
			id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "R22.PanicCommit", Key: key}
			l1, _ := r22RawLease(t, p, id)
			time.Sleep(2 * lease)
			l2, st2 := r22RawLease(t, p, id)
			if st2 == "PROCESSING" && l2.After(l1) {
				t.Errorf("claim renewed after the call was gone: %v then %v", l1, l2)
			}
			rt2, err := runtime.New(store, runtime.WithLease(lease), runtime.WithMaxWait(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var dupErr error
			_ = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
				_, dupErr = pgstore.DoTx(ctx, rt2, tx, call)
				return nil
			})
			rows := count(t, p, "SELECT count(*) FROM "+ledger+" WHERE key = $1", key)
			t.Logf("record after: %v; duplicate: %v; runs %d; rows %d", st2, dupErr, runs.Load(), rows)
			if rows > 1 {
				t.Errorf("%d committed effects", rows)
			}
			if errors.Is(dupErr, runtime.ErrInProgress) {
				t.Errorf("duplicate after the call was gone: %v", dupErr)
			}
		})
	}
}
