// Command after is the shop service of ../before after the steps of
// docs/adopting.md: its payment endpoint and its PSP charges are
// idempotent, with a reconciler and a sweeper.
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/examples/adopt/after/db"
	"github.com/idemkit/idem/examples/adopt/after/gateway"
	"github.com/idemkit/idem/examples/adopt/after/shop"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/pgstore"
)

func main() {
	dsn := flag.String("postgres", "postgres://localhost/shop", "PostgreSQL DSN")
	psp := flag.String("psp", "http://localhost:9090", "the PSP's base URL")
	addr := flag.String("addr", ":8080", "listen address")
	migrate := flag.Bool("migrate", false, "create the idem record table (pgstore.Migrate) when there is no migration tool")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if *migrate {
		if err := pgstore.Migrate(ctx, pool); err != nil {
			log.Fatal(err)
		}
	}
	rt, err := runtime.New(pgstore.New(pool))
	if err != nil {
		log.Fatal(err)
	}

	// The PSP client retries with one key per charge (step 6).
	psClient := idemhttp.NewClient(nil)
	psClient.Timeout = 30 * time.Second // the whole charge, retries included
	gw := &gateway.Client{BaseURL: *psp, HTTP: psClient}
	pay := shop.NewIdempotentPayments(shop.NewPayments(gw), rt)

	mux := http.NewServeMux()
	shop.NewService(db.New(pool), pay).Routes(mux)
	handler := idemhttp.Middleware(rt,
		idemhttp.Required(true),
		idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Customer-ID") }),
	)(mux)

	// Converge unknown outcomes and delete expired records (step 5).
	rec, err := runtime.NewReconciler(rt)
	if err != nil {
		log.Fatal(err)
	}
	sw, err := runtime.NewSweeper(rt)
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = rec.Run(ctx) }()
	go func() { _ = sw.Run(ctx) }()

	srv := &http.Server{Addr: *addr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
