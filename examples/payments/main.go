// Command payments is a payment service made idempotent with idemgen: the
// Payments interface in service.go is annotated, `go generate` writes
// payments_idem.go, and main drives the generated wrapper through what
// at-least-once delivery does to a service: duplicates (replayed, never
// charged twice), a key reused with another request (rejected), another
// merchant using the same key (its own record), a duplicate that arrives
// while the first call is in flight, and a gateway timeout whose outcome is
// unknown until FindCharge reconciles it (inline, when the client retries,
// or by the background reconciler, which finds FindCharge registered under
// the operation name by the generated constructor).
//
// It runs on the in-process memory store:
//
//	go run ./examples/payments
//
// With PostgreSQL it runs on pgstore and also creates orders with a local
// effect, in the same transaction as their idempotency record:
//
//	go run ./examples/payments -postgres postgres://localhost/shop
//	IDEM_POSTGRES_URL=postgres://localhost/shop go run ./examples/payments
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/pgstore"
)

func main() {
	fs := flag.NewFlagSet("payments", flag.ExitOnError)
	dsn := fs.String("postgres", os.Getenv("IDEM_POSTGRES_URL"), "PostgreSQL DSN (default $IDEM_POSTGRES_URL); without it the memory store is used")
	_ = fs.Parse(os.Args[1:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, *dsn); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

// demo is one run of the example.
type demo struct {
	out      io.Writer
	pay      Payments
	gateway  *Gateway
	prefix   string // of keys: empty on memory, unique per run on PostgreSQL
	requests int

	reconciler *runtime.Reconciler
}

func run(ctx context.Context, out io.Writer, dsn string) error {
	gw := NewGateway(20 * time.Millisecond)
	svc := &service{gateway: gw}
	opts := []runtime.Option{runtime.WithMaxWait(100 * time.Millisecond)}
	d := &demo{out: out, gateway: gw}
	var rec *runtime.Reconciler

	var pool *pgxpool.Pool
	var store runtime.Store
	if dsn == "" {
		store = memstore.New()
		fmt.Fprintln(out, "idem payments example on the memory store (give -postgres DSN or set IDEM_POSTGRES_URL for PostgreSQL)")
	} else {
		var err error
		pool, err = pgxpool.New(ctx, dsn)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := pgstore.Migrate(ctx, pool); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, ordersTable); err != nil {
			return fmt.Errorf("creating example_orders: %w", err)
		}
		store = pgstore.New(pool)
		// Records outlive the process: keys of this run are new.
		d.prefix = strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
		fmt.Fprintln(out, "idem payments example on PostgreSQL")
	}
	rt, err := runtime.New(store, opts...)
	if err != nil {
		return err
	}
	d.pay = NewIdempotentPayments(svc, rt)
	if rec, err = runtime.NewReconciler(rt); err != nil {
		return err
	}
	d.reconciler = rec
	fmt.Fprintln(out)

	if err := d.charges(ctx); err != nil {
		return err
	}
	if pool != nil {
		if err := d.orders(ctx, pool); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(out, "\n(orders with a local effect need PostgreSQL: run with -postgres DSN)")
	}
	calls, charges := gw.Stats()
	fmt.Fprintf(out, "\n%d charge requests, %d calls to the gateway, %d charges: no card was charged twice\n", d.requests, calls, charges)
	return nil
}

func (d *demo) key(k string) string { return d.prefix + k }

func (d *demo) charge(ctx context.Context, label string, req ChargeRequest) (ChargeReceipt, error) {
	d.requests++
	rc, err := d.pay.Charge(ctx, req)
	d.show(label, rc, err)
	return rc, err
}

func (d *demo) show(label string, rc ChargeReceipt, err error) {
	if err != nil {
		fmt.Fprintf(d.out, "%-58s -> %s\n", label, describe(err))
		return
	}
	fmt.Fprintf(d.out, "%-58s -> %s (%d.%02d %s)\n", label, rc.ChargeID, rc.Cents/100, rc.Cents%100, rc.Currency)
}

// describe names the idem sentinel an error matches, as an HTTP handler
// would map it to a status code.
func describe(err error) string {
	switch {
	case errors.Is(err, runtime.ErrKeyReused):
		return "rejected, key reused with another request (422)"
	case errors.Is(err, runtime.ErrInProgress):
		return "in progress, retry later (409)"
	case errors.Is(err, runtime.ErrOutcomeUnknown):
		return "outcome unknown, not charged again (503)"
	}
	return "error: " + err.Error()
}

func (d *demo) charges(ctx context.Context) error {
	pay1 := ChargeRequest{IdempotencyKey: d.key("pay-1"), MerchantID: "acme", Card: "4242", Cents: 2500, Currency: "EUR"}
	first, err := d.charge(ctx, "charge pay-1 for acme", pay1)
	if err != nil {
		return err
	}
	rc, err := d.charge(ctx, "retry pay-1 (duplicate: replayed, gateway not called)", pay1)
	if err != nil || rc != first {
		return fmt.Errorf("duplicate of pay-1 not replayed: %+v, %v", rc, err)
	}
	var wg sync.WaitGroup
	results := make([]ChargeReceipt, 3)
	errs := make([]error, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = d.pay.Charge(ctx, pay1)
		}()
	}
	wg.Wait()
	d.requests += len(results)
	for i := range results {
		if errs[i] != nil || results[i] != first {
			return fmt.Errorf("concurrent duplicate of pay-1: %+v, %v", results[i], errs[i])
		}
	}
	fmt.Fprintf(d.out, "%-58s -> %s, %s, %s\n", "3 more duplicates of pay-1 at once (replayed)", results[0].ChargeID, results[1].ChargeID, results[2].ChargeID)

	reused := pay1
	reused.Cents = 99900
	if _, err := d.charge(ctx, "pay-1 again with another amount", reused); !errors.Is(err, runtime.ErrKeyReused) {
		return fmt.Errorf("key reuse not rejected: %v", err)
	}
	other := pay1
	other.MerchantID = "globex"
	if _, err := d.charge(ctx, "pay-1 for merchant globex (another scope)", other); err != nil {
		return err
	}

	// The network to card 4000's bank is flaky: the gateway charges, but
	// its response is lost and the client sees a timeout.
	d.gateway.setFlaky("4000", 1)
	pay3 := ChargeRequest{IdempotencyKey: d.key("pay-3"), MerchantID: "acme", Card: "4000", Cents: 1250, Currency: "EUR"}
	if _, err := d.charge(ctx, "charge pay-3 (the gateway's response times out)", pay3); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		return fmt.Errorf("timeout not reported as unknown: %v", err)
	}
	if _, err := d.charge(ctx, "retry pay-3 (FindCharge reconciles: it happened)", pay3); err != nil {
		return err
	}

	// A duplicate that arrives while the first call is still running
	// waits up to MaxWait, then is told to retry later.
	d.gateway.setSlow("5555", 400*time.Millisecond)
	pay4 := ChargeRequest{IdempotencyKey: d.key("pay-4"), MerchantID: "acme", Card: "5555", Cents: 4200, Currency: "EUR"}
	done := make(chan error, 1)
	d.requests++
	calls, _ := d.gateway.Stats()
	go func() {
		_, err := d.pay.Charge(ctx, pay4)
		done <- err
	}()
	if err := d.gateway.waitCalls(ctx, calls+1); err != nil { // the first call reached the gateway
		return err
	}
	if _, err := d.charge(ctx, "pay-4 while its first call is in flight", pay4); !errors.Is(err, runtime.ErrInProgress) {
		return fmt.Errorf("in-flight duplicate: %v", err)
	}
	if err := <-done; err != nil {
		return err
	}
	if _, err := d.charge(ctx, "retry pay-4 after the first call finished (replayed)", pay4); err != nil {
		return err
	}

	// No retry comes this time: the background reconciler converges the
	// UNKNOWN record with the query NewIdempotentPayments registered.
	d.gateway.setFlaky("4000", 1)
	pay5 := ChargeRequest{IdempotencyKey: d.key("pay-5"), MerchantID: "acme", Card: "4000", Cents: 990, Currency: "EUR"}
	if _, err := d.charge(ctx, "charge pay-5 (times out too)", pay5); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		return fmt.Errorf("timeout not reported as unknown: %v", err)
	}
	st, err := d.reconciler.RunOnce(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "%-58s -> %d converged to SUCCESS\n", "reconciler pass (asks FindCharge about UNKNOWN records)", st.Succeeded)
	if st.Succeeded < 1 {
		return fmt.Errorf("the reconciler did not converge pay-5: %+v", st)
	}
	if _, err := d.charge(ctx, "retry pay-5 later (replayed, converged)", pay5); err != nil {
		return err
	}
	return nil
}

// orders creates orders with the local effect: the order row and its
// idempotency record commit or roll back together.
func (d *demo) orders(ctx context.Context, pool *pgxpool.Pool) error {
	fmt.Fprintln(d.out)
	create := func(label string, req OrderRequest, commit bool) (Order, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return Order{}, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		o, err := d.pay.CreateOrder(ctx, tx, req)
		if err != nil {
			return Order{}, err
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				return Order{}, err
			}
		}
		fmt.Fprintf(d.out, "%-58s -> order #%d\n", label, o.Number)
		return o, nil
	}
	o1 := OrderRequest{OrderID: d.key("order-1"), MerchantID: "acme", Item: "espresso machine", Cents: 34900}
	first, err := create("create order-1 (committed)", o1, true)
	if err != nil {
		return err
	}
	again, err := create("retry order-1 in a new transaction (replayed)", o1, true)
	if err != nil {
		return err
	}
	if again != first {
		return fmt.Errorf("order-1 not replayed: %+v then %+v", first, again)
	}
	o2 := OrderRequest{OrderID: d.key("order-2"), MerchantID: "acme", Item: "grinder", Cents: 12900}
	if _, err := create("create order-2, then the transaction rolls back", o2, false); err != nil {
		return err
	}
	if _, err := create("retry order-2 (nothing was recorded: created)", o2, true); err != nil {
		return err
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM example_orders WHERE order_id = ANY($1)`, []string{o1.OrderID, o2.OrderID}).Scan(&n); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "%-58s -> %d\n", "rows in example_orders for order-1 and order-2", n)
	if n != 2 {
		return fmt.Errorf("%d order rows, want 2", n)
	}
	return nil
}
