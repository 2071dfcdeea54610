package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r24Pool connects without Migrate (no DDL, no table lock on the shared
// table: the review's rule); the records of this file are in a scope of
// their own.
func r24Pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	dsn := testenv.PostgresURL(t)
	p, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// r24FailRenew fails every Renew with a transient error.
type r24FailRenew struct{ *pgstore.Store }

func (s r24FailRenew) Renew(ctx context.Context, p runtime.RenewParams) (time.Time, error) {
	return time.Time{}, errors.New("r24: renew: connection refused")
}

type r24GoexitLog struct {
	msg string
	hit *atomic.Int32
}

func (h r24GoexitLog) Enabled(context.Context, slog.Level) bool { return true }
func (h r24GoexitLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		h.hit.Add(1)
		goruntime.Goexit()
	}
	return nil
}
func (h r24GoexitLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h r24GoexitLog) WithGroup(string) slog.Handler      { return h }

// runtime.TestR24RenewLogGoexitOverlapsOwners on PostgreSQL (group commit
// too): a renewal round that dies in the log handler ("renewing lease
// failed; retrying") never stops the effect; a duplicate takes the expired
// lease over and runs the effect beside it, and records SUCCESS.
func TestR24PGRenewLogGoexitOverlapsOwners(t *testing.T) {
	p := r24Pool(t)
	for _, m := range []struct {
		name string
		opts []pgstore.Option
	}{{"plain", nil}, {"group commit", []pgstore.Option{pgstore.WithGroupCommit(0)}}} {
		t.Run(m.name, func(t *testing.T) {
			ctx := scopedCtx(t.Name())
			var hit atomic.Int32
			st := pgstore.New(p, m.opts...)
			rt, err := runtime.New(r24FailRenew{st}, runtime.WithLease(300*time.Millisecond),
				runtime.WithLogger(slog.New(r24GoexitLog{msg: "renewing lease failed", hit: &hit})))
			if err != nil {
				t.Fatal(err)
			}
			var running, overlap, runs atomic.Int32
			effect := func(ctx context.Context, _ string) (int, error) {
				runs.Add(1)
				if running.Add(1) > 1 {
					overlap.Add(1)
				}
				defer running.Add(-1)
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(900 * time.Millisecond):
					return 1, nil
				}
			}
			call := runtime.Call[string, int]{Operation: "r24.pgrenewlog", Key: "k", Request: "r", Effect: effect}
			first := make(chan error, 1)
			go func() {
				_, err := runtime.Do(ctx, rt, call)
				first <- err
			}()
			time.Sleep(450 * time.Millisecond)
			rt2, err := runtime.New(st, runtime.WithLease(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			_, err2 := runtime.Do(ctx, rt2, call)
			err1 := <-first
			t.Logf("log Goexits %d; runs %d, overlapping %d; first: %v; duplicate: %v", hit.Load(), runs.Load(), overlap.Load(), err1, err2)
			if overlap.Load() > 0 {
				t.Errorf("two owners' effects ran at once: the renewal round died in the log handler before stopping the effect")
			}
		})
	}
}
