package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
	"github.com/idemkit/idem/runtime/storetest"
)

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

// testPool connects once per test binary and applies the migration.
func testPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := testenv.PostgresURL(t)
	poolOnce.Do(func() {
		ctx := context.Background()
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			poolErr = err
			return
		}
		cfg.MaxConns = 32
		pool, poolErr = pgxpool.NewWithConfig(ctx, cfg)
		if poolErr == nil {
			poolErr = pgstore.Migrate(ctx, pool)
		}
	})
	if poolErr != nil {
		t.Fatalf("connecting to %s: %v", testenv.PostgresURLVar, poolErr)
	}
	return pool
}

// TestConformance runs the suite on each order of a claim's statements:
// as the store guesses it, always reading first, always inserting first.
// Each case has a schema of its own: the cases run in parallel, and one
// case's reconciler would otherwise converge another's expired records (the
// size cases recorded FAILED into SlowClaimReplyNeverOverlaps's record).
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order int
	}{{"guessed", 0}, {"read-first", 1}, {"insert-first", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) runtime.Store {
				s := teststores.Postgres(t).(*pgstore.Store)
				pgstore.SetClaimOrder(s, tc.order)
				return s
			})
		})
	}
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	p := testPool(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- pgstore.Migrate(context.Background(), p)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// countingTracer counts the statements sent to the server.
type countingTracer struct{ n atomic.Int32 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestRoundTrips(t *testing.T) {
	testPool(t) // skips or fails like the others when there is no server
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	cfg.MaxConns = 1 // one connection: its statement cache is warm after the first call
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rt, err := runtime.New(pgstore.New(p))
	if err != nil {
		t.Fatal(err)
	}
	ctx = runtime.WithScope(ctx, "roundtrips/"+time.Now().Format(time.RFC3339Nano))
	do := func(key string) {
		t.Helper()
		_, err := runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "T.RoundTrips", Key: key, Request: "req",
			Effect: func(context.Context, string) (string, error) { return "resp", nil }})
		if err != nil {
			t.Fatal(err)
		}
	}
	do("warm-up") // prepares the statements on the connection
	do("warm-up")
	for range 64 { // a store's guess of the claim's first statement starts at "insert"
		do(fmt.Sprint("warm-up-", time.Now().UnixNano()))
	}
	// The statements sent, in order, when the store guesses "insert first"
	// (a new store, or one whose recent claims inserted) and "read first"
	// (one whose recent claims found records).
	for _, step := range []struct {
		what, key string
		want      int
	}{
		{"first call, inserting first: insert, complete", "a", 2},
		{"replay, inserting first: the insert finds the record, read", "a", 2},
		{"replay, reading first: read", "a", 1},
		// Two replays, worth two first calls each, turn reads on for four.
		{"first call, reading first: read, insert, complete", "b", 3},
		{"first call, reading first: read, insert, complete", "c", 3},
		{"first call, reading first: read, insert, complete", "d", 3},
		{"first call, reading first: read, insert, complete", "e", 3},
		{"first call, inserting first again: insert, complete", "f", 2},
	} {
		tracer.n.Store(0)
		do(step.key)
		if n := tracer.n.Load(); int(n) != step.want {
			t.Errorf("%s: %d statements, want %d", step.what, n, step.want)
		}
	}
}

func TestTooLarge(t *testing.T) {
	s := pgstore.New(testPool(t), pgstore.WithMaxRecordBytes(16))
	rt, err := runtime.New(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "toolarge/"+time.Now().Format(time.RFC3339Nano))
	_, err = runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: "T.Large", Key: "k", Request: strings.Repeat("x", 64),
		Effect: func(context.Context, string) (string, error) { return "", nil }})
	if !errors.Is(err, runtime.ErrTooLarge) {
		t.Fatalf("error = %v, want ErrTooLarge", err)
	}
}

// The sweeper and the reconciler walk partial indexes, never the whole table.
func TestSweepAndAcquireUseIndexes(t *testing.T) {
	p := testPool(t)
	ctx := context.Background()
	conn, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// A tiny test table makes a sequential scan cheapest; forbid it to see
	// whether an index can serve the query at all.
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	plans := map[string]string{
		"idem_records_expires_at_idx": `EXPLAIN SELECT scope FROM idem_records
			WHERE expires_at <= now() AND state IN ('SUCCESS', 'FAILED') ORDER BY expires_at LIMIT 100`,
		"idem_records_pending_idx": `EXPLAIN SELECT scope FROM idem_records
			WHERE (state = 'PROCESSING' AND lease_expires_at <= now()) OR (state = 'UNKNOWN' AND (lease_expires_at IS NULL OR lease_expires_at <= now()))
			ORDER BY lease_expires_at NULLS FIRST LIMIT 100`,
	}
	for index, query := range plans {
		rows, err := tx.Query(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		var plan strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan.String(), index) || strings.Contains(plan.String(), "Seq Scan") {
			t.Errorf("plan does not use %s:\n%s", index, plan.String())
		}
	}
}
