package idemgrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestPanicNilHandler: under GODEBUG=panicnil=1 (the default of a main
// module whose go.mod says go 1.20 or older) a handler that panics with
// nil panicked: the key is released and the retry runs the handler again,
// never replayed a nil response as a success.
func TestPanicNilHandler(t *testing.T) {
	testenv.SetPanicNil(t)
	f := start(t, setup{store: memstore.New()})
	ctx := context.Background()
	a := f.call(t, ctx, call{tenant: "acme", keys: []string{"k1"}, mode: "panic-nil-once"})
	if status.Code(a.err) != codes.Internal || f.caught.Load() != "panic(nil)" {
		t.Fatalf("first: %v (the outer interceptor caught %v)", a.err, f.caught.Load())
	}
	b := f.call(t, ctx, call{tenant: "acme", keys: []string{"k1"}, mode: "panic-nil-once"})
	if b.err != nil || b.replayed || f.runs.Load() != 2 {
		t.Fatalf("retry after a panic(nil): %v, replayed %v (runs %d): want the key released and the handler run again", b.err, b.replayed, f.runs.Load())
	}
}
