// Command httpserver is a small payment API made idempotent with
// runtime/idemhttp: POST /charges with an Idempotency-Key header charges at
// most once per (account, key); retries get the stored response with
// "Idempotent-Replayed: true". See README.md for a curl session.
//
//	go run ./examples/httpserver                      # memory store, :8080
//	go run ./examples/httpserver -addr 127.0.0.1:9000 -postgres postgres://localhost/shop
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/pgstore"
)

func main() {
	fs := flag.NewFlagSet("httpserver", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	dsn := fs.String("postgres", os.Getenv("IDEM_POSTGRES_URL"), "PostgreSQL DSN (default $IDEM_POSTGRES_URL); without it the memory store is used")
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := serve(ctx, *addr, *dsn); err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, addr, dsn string) error {
	store, closeStore, err := openStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer closeStore()
	rt, err := runtime.New(store)
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	srv := &http.Server{Addr: addr, Handler: newHandler(rt, newLedger()), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	slog.Info("httpserver listening", "addr", addr, "store", map[bool]string{true: "postgres", false: "memory"}[dsn != ""])
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("listening: %w", err)
	}
	return nil
}

func openStore(ctx context.Context, dsn string) (runtime.Store, func(), error) {
	if dsn == "" {
		return memstore.New(), func() {}, nil
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("migrating: %w", err)
	}
	return pgstore.New(pool), pool.Close, nil
}

// newHandler is the API: the middleware around a ServeMux, so that the
// operation is the route pattern ("POST /charges").
func newHandler(rt *runtime.Runtime, l *ledger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", l.charge)
	mux.HandleFunc("GET /charges", l.list)
	return idemhttp.Middleware(rt,
		// A toy principal: a real server takes it from its authentication.
		idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Account") }),
		idemhttp.Required(true),
	)(mux)
}

// ledger stands for the payment gateway: every charge it records is money
// moved.
type ledger struct {
	mu      sync.Mutex
	charges []charge
}

type charge struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

func newLedger() *ledger { return &ledger{} }

func (l *ledger) charge(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Cents int64 `json:"cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Cents <= 0 {
		http.Error(w, `{"error":"body must be {\"cents\": N} with N > 0"}`, http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	c := charge{ID: fmt.Sprintf("ch_%03d", len(l.charges)+1), Account: r.Header.Get("X-Account"), Cents: in.Cents}
	l.charges = append(l.charges, c)
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/"+c.ID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(c)
}

func (l *ledger) list(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(l.charges)
}
