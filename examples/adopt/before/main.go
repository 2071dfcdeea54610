// Command before is a small shop service as it is written without idem:
// net/http, pgx, sqlc-style queries, a PSP client with a retry loop. See
// docs/adopting.md for the steps that make it idempotent (../after).
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

	"github.com/idemkit/idem/examples/adopt/before/db"
	"github.com/idemkit/idem/examples/adopt/before/gateway"
	"github.com/idemkit/idem/examples/adopt/before/shop"
)

func main() {
	dsn := flag.String("postgres", "postgres://localhost/shop", "PostgreSQL DSN")
	psp := flag.String("psp", "http://localhost:9090", "the PSP's base URL")
	addr := flag.String("addr", ":8080", "listen address")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	gw := &gateway.Client{BaseURL: *psp, HTTP: &http.Client{Timeout: 10 * time.Second}}
	mux := http.NewServeMux()
	shop.NewService(db.New(pool), gw).Routes(mux)

	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
