package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

type cardReq struct {
	Amount int    `json:"amount"`
	Card   string `json:"-"`
}

// DoTx fingerprints a request as runtime.Do does, parts JSON leaves out
// included: another card under the same key is ErrKeyReused through
// either door, the same request replays through either.
func TestDoTxFingerprintCoversWhatJSONSkips(t *testing.T) {
	p := testPool(t)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	runs := 0
	dotx := func(req cardReq) (string, error) {
		var out string
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			var err error
			out, err = pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[cardReq, string]{Operation: "T.Card", Key: "k", Request: req,
				Effect: func(context.Context, pgx.Tx, cardReq) (string, error) { runs++; return "charged", nil }})
			return err
		})
		return out, err
	}
	do := func(req cardReq) (string, error) {
		return runtime.Do(ctx, rt, runtime.Call[cardReq, string]{Operation: "T.Card", Key: "k", Request: req,
			Effect: func(context.Context, cardReq) (string, error) { runs++; return "charged", nil }})
	}
	visa, other := cardReq{100, "4111111111111111"}, cardReq{100, "5500000000000004"}
	if out, err := dotx(visa); err != nil || out != "charged" {
		t.Fatalf("first: %q, %v", out, err)
	}
	if out, err := dotx(visa); err != nil || out != "charged" {
		t.Fatalf("DoTx replay: %q, %v", out, err)
	}
	if out, err := do(visa); err != nil || out != "charged" {
		t.Fatalf("Do replay of DoTx's record: %q, %v", out, err)
	}
	if _, err := dotx(other); !errors.Is(err, runtime.ErrKeyReused) {
		t.Fatalf("DoTx, another card: %v, want ErrKeyReused", err)
	}
	if _, err := do(other); !errors.Is(err, runtime.ErrKeyReused) {
		t.Fatalf("Do, another card: %v, want ErrKeyReused", err)
	}
	if runs != 1 {
		t.Fatalf("effect ran %d times, want 1", runs)
	}
}

// A DoTx whose key another DoTx holds in flight with another request is
// told ErrKeyReused at once: it does not wait for the first to finish.
func TestDoTxKeyReusedWhileInFlight(t *testing.T) {
	p := testPool(t)
	rt, err := runtime.New(pgstore.New(p), runtime.WithMaxWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := scopedCtx(t.Name())
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[cardReq, string]{Operation: "T.InFlight", Key: "k", Request: cardReq{100, "4111"},
				Effect: func(context.Context, pgx.Tx, cardReq) (string, error) {
					close(started)
					<-release
					return "charged", nil
				}})
			return err
		})
	}()
	<-started
	begin := time.Now()
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		_, err := pgstore.DoTx(ctx, rt, tx, pgstore.TxCall[cardReq, string]{Operation: "T.InFlight", Key: "k", Request: cardReq{999, "4111"},
			Effect: func(context.Context, pgx.Tx, cardReq) (string, error) {
				t.Error("the second effect ran")
				return "", nil
			}})
		return err
	})
	waited := time.Since(begin)
	close(release)
	if !errors.Is(err, runtime.ErrKeyReused) || waited > time.Second {
		t.Fatalf("another request while the first is in flight: %v after %v; want ErrKeyReused at once", err, waited.Round(time.Millisecond))
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
