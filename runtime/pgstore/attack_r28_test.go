package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r28Pool returns a pool of maxConns on a schema of its own (migrated,
// dropped at the end): nothing here touches the shared public table.
func r28Pool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("r28_%d", time.Now().UnixNano())
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		if c, err := pgx.ConnectConfig(context.Background(), cfg.ConnConfig.Copy()); err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	})
	if err := pgstore.Migrate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "CREATE TABLE r28_orders (id bigserial PRIMARY KEY, ref text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return p
}

type r28Req struct {
	Ref string `json:"ref"`
}

func r28Rows(t *testing.T, p *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := p.QueryRow(context.Background(), "SELECT count(*) FROM r28_orders").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The DoTx schedules review r28 tried that held (a caller holding its
// transaction past the lease, a savepoint rolled back, the caller's backend
// killed, a mixed schedule) are in branch r28: they had no allowance for
// a starved machine, and a failure left the pool's Close waiting on an open
// transaction.

// docs/reliability.md, "The rules every door keeps", Classification: "A
// timeout anywhere in an error's tree or a cancellation ... is UNKNOWN
// whatever the error policy and whatever Permanent or Retryable says"; the
// doors are runtime.Do, generated wrappers (a method whose effect is local
// is generated as pgstore.DoTx), idemhttp, idemgrpc, and DoTx through
// runtime.DoLocal, where "any other error, a timeout included, releases
// the claim".
//
// Schedule: the effect's statement runs out of time (its context's
// deadline) and the effect wraps what it got as a permanent failure
// (runtime.Permanent(fmt.Errorf("charging: %w", err)), as code that marks
// every failure of one step permanent does). runtime.Do classifies it
// UNKNOWN (the timeout wins). DoTx records FAILED, committed on its own:
// every retry for the TTL replays a permanent failure of an attempt that
// only timed out, whose writes were rolled back (nothing happened).
func TestR28DoTxPermanentTimeoutRecordedFailed(t *testing.T) {
	p := r28Pool(t, 4)
	st := pgstore.New(p)
	rt, err := runtime.New(st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r28")
	timedOut := func() error { return runtime.Permanent(fmt.Errorf("charging: %w", context.DeadlineExceeded)) }

	// runtime.Do, the same error: UNKNOWN.
	_, derr := runtime.Do(ctx, rt, runtime.Call[r28Req, int64]{Operation: "r28.permtimeout.do", Key: "k", Request: r28Req{"a"},
		Effect: func(context.Context, r28Req) (int64, error) { return 0, timedOut() }})
	drec, _ := st.Get(ctx, runtime.Identity{Scope: "r28", Operation: "r28.permtimeout.do", Key: "k"})
	t.Logf("runtime.Do: %v; record %s", derr, drec.State)

	var runs atomic.Int32
	call := pgstore.TxCall[r28Req, int64]{Operation: "r28.permtimeout", Key: "k", Request: r28Req{"a"},
		Effect: func(ctx context.Context, tx pgx.Tx, r r28Req) (int64, error) {
			runs.Add(1)
			if _, err := tx.Exec(ctx, "INSERT INTO r28_orders (ref) VALUES ($1)", r.Ref); err != nil {
				return 0, err
			}
			if runs.Load() == 1 {
				return 0, timedOut()
			}
			return 7, nil
		}}
	for i := 0; i < 2; i++ {
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v, err := pgstore.DoTx(ctx, rt, tx, call)
		cerr := tx.Commit(ctx)
		rec, gerr := st.Get(ctx, runtime.Identity{Scope: "r28", Operation: "r28.permtimeout", Key: "k"})
		t.Logf("DoTx %d: %d, %v (commit %v); record %s %v; effect runs %d; rows %d", i+1, v, err, cerr, rec.State, gerr, runs.Load(), r28Rows(t, p))
	}
	if drec.State != runtime.StateUnknown {
		t.Fatalf("runtime.Do recorded %s for a timeout marked permanent; the rule says UNKNOWN", drec.State)
	}
	if runs.Load() != 2 || r28Rows(t, p) != 1 {
		t.Fatalf("a DoTx attempt that timed out (marked permanent) was recorded FAILED: its retry replayed the failure (effect runs %d, rows %d) though nothing happened; a timeout anywhere in the error's tree is never a permanent failure, whatever Permanent says, and DoTx releases the claim after a timeout", runs.Load(), r28Rows(t, p))
	}
}
