package runtime_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type benchReq struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

type benchResp struct {
	ChargeID string `json:"charge_id"`
	Cents    int64  `json:"cents"`
}

func benchEffect(_ context.Context, r benchReq) (benchResp, error) {
	return benchResp{ChargeID: "ch_1", Cents: r.Cents}, nil
}

// BenchmarkMemDirect is the baseline: the effect called without idem.
func BenchmarkMemDirect(b *testing.B) {
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		if _, err := benchEffect(ctx, benchReq{"acct", 100}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemDoFirstCall measures a first call (claim, effect, complete) on the
// memory store: the runtime's overhead per new key.
func BenchmarkMemDoFirstCall(b *testing.B) {
	b.ReportAllocs()
	rt, err := runtime.New(memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ { // not b.Loop: every iteration needs a new key
		_, err := runtime.Do(ctx, rt, runtime.Call[benchReq, benchResp]{Operation: "Payments.Charge", Key: keys[i],
			Request: benchReq{"acct", 100}, Effect: benchEffect})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemDoReplay measures a duplicate replayed from the memory store.
func BenchmarkMemDoReplay(b *testing.B) {
	b.ReportAllocs()
	rt, err := runtime.New(memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	call := runtime.Call[benchReq, benchResp]{Operation: "Payments.Charge", Key: "key", Request: benchReq{"acct", 100}, Effect: benchEffect}
	if _, err := runtime.Do(ctx, rt, call); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := runtime.Do(ctx, rt, call); err != nil {
			b.Fatal(err)
		}
	}
}
