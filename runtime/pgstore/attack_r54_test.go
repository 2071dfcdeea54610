package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r54Resp's MarshalJSON fails with an error whose text is its Err: a NUL
// byte, or bytes that are not UTF-8 (a Latin-1 value quoted in the error).
type r54Resp struct{ Err string }

func (r r54Resp) MarshalJSON() ([]byte, error) { return nil, errors.New(r.Err) }

// Review r54, finding 1. runtime.ErrNotReplayable: "the call with this
// identity succeeded, but its response was not stored (... or not
// encodable), so it cannot be replayed. The effect is not run again". The
// runtime records SUCCESS without the response and a note quoting the
// encoding error; PostgreSQL's text refused a note holding a NUL byte or
// bytes that are not UTF-8 (SQLSTATE 22021), the record stayed PROCESSING,
// and every duplicate after the lease ran the effect again. The note is
// now stored with such bytes replaced (U+FFFD).
func TestR54UnencodableResponseNote(t *testing.T) {
	for _, tc := range []struct{ name, text string }{
		{"NUL", "cannot encode field \x00name"},
		{"Latin-1", "unknown currency \"\xa3\" in price"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, sx := range []struct {
				name string
				s    runtime.Store
			}{{"postgres", pgstore.New(testPool(t))}, {"postgres/group", pgstore.New(testPool(t), pgstore.WithGroupCommit(0))}, {"memory", memstore.New()}} {
				t.Run(sx.name, func(t *testing.T) { r54Unencodable(t, sx.s, tc.text) })
			}
		})
	}
}

func r54Unencodable(t *testing.T, store runtime.Store, text string) {
	testenv.Within(t, 15*time.Second, func() {
		ctx := runtime.WithScope(context.Background(), fmt.Sprintf("r54/%d", time.Now().UnixNano()))
		rt, err := runtime.New(store, runtime.WithCompletionTimeout(2*time.Second), runtime.WithMaxWait(0))
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		call := runtime.Call[string, r54Resp]{Operation: "R54.Unencodable", Key: "k", Request: "req", Lease: 300 * time.Millisecond,
			Effect: func(context.Context, string) (r54Resp, error) { runs.Add(1); return r54Resp{Err: text}, nil }}
		_, err1 := runtime.Do(ctx, rt, call)
		if err1 != nil {
			t.Errorf("first call: %v, want its own response", err1)
		}
		time.Sleep(400 * time.Millisecond) // past the lease
		_, err2 := runtime.Do(ctx, rt, call)
		if n := runs.Load(); n != 1 || !errors.Is(err2, runtime.ErrNotReplayable) {
			t.Fatalf("the effect ran %d times, the duplicate was told %v; want once and ErrNotReplayable (first call: %v)", n, err2, err1)
		}
		rec, err := store.Get(ctx, runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: call.Operation, Key: call.Key})
		if err != nil || rec.State != runtime.StateSuccess || !strings.Contains(rec.Note, "encoding it failed") {
			t.Errorf("record: %s %q, %v; want SUCCESS with a note quoting the encoding error", rec.State, rec.Note, err)
		}
	})
}

// Review r54's observation: a resolution whose reason is not UTF-8 (typed
// on a Latin-1 terminal) took the record, failed to write it on PostgreSQL
// and left it held by the resolver until its lease ended. It resolves now,
// the reason stored with the bytes replaced.
func TestR54ResolveLatin1Reason(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		ctx := runtime.WithScope(context.Background(), fmt.Sprintf("r54-res/%d", time.Now().UnixNano()))
		store := pgstore.New(testPool(t))
		rt, err := runtime.New(store)
		if err != nil {
			t.Fatal(err)
		}
		id := runtime.Identity{Scope: runtime.ScopeFrom(ctx), Operation: "R54.Resolve", Key: "k"}
		_, err = runtime.Do(ctx, rt, runtime.Call[string, string]{Operation: id.Operation, Key: id.Key, Request: "x",
			Effect: func(context.Context, string) (string, error) { return "", context.DeadlineExceeded }})
		if !errors.Is(err, runtime.ErrOutcomeUnknown) {
			t.Fatalf("call: %v, want UNKNOWN", err)
		}
		if _, err := runtime.Resolve(ctx, store, runtime.Resolution{ID: id, To: runtime.ResolveFailed, Failure: errors.New("refused by the bank"),
			Reason: "no charge in the caf\xe9's gateway", Owner: "idemctl:alice"}); err != nil {
			t.Fatalf("resolve with a Latin-1 reason: %v", err)
		}
		rec, err := store.Get(ctx, id)
		if err != nil || rec.State != runtime.StateFailed || !strings.Contains(rec.Note, "caf\uFFFD's gateway") {
			t.Errorf("after the resolution: %s %q, %v; want FAILED, the reason stored with U+FFFD", rec.State, rec.Note, err)
		}
	})
}
