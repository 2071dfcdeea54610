package runtime_test

import (
	"context"
	goruntime "runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/internal/benchsvc"
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
	memBench(b) // the same heap as the calls it is the baseline of
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
	rt, keys := memBench(b)
	ctx := context.Background()
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
	rt, _ := memBench(b)
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

// BenchmarkMemWrapperDirect is the wrapper benchmarks' baseline: the
// service's method called without idem.
func BenchmarkMemWrapperDirect(b *testing.B) {
	memBench(b)
	ctx := context.Background()
	var svc benchsvc.Payments = benchsvc.Direct{}
	for b.Loop() {
		if _, err := svc.Charge(ctx, benchsvc.ChargeRequest{Key: "key", Merchant: "m1", Account: "acct", Cents: 100}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemWrapperFirstCall measures a first call through a wrapper
// idemgen generated (runtime/internal/benchsvc), on the memory store.
func BenchmarkMemWrapperFirstCall(b *testing.B) {
	rt, keys := memBench(b)
	svc := benchsvc.NewIdempotentPayments(benchsvc.Direct{}, rt)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ { // not b.Loop: every iteration needs a new key
		if _, err := svc.Charge(ctx, benchsvc.ChargeRequest{Key: keys[i], Merchant: "m1", Account: "acct", Cents: 100}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemWrapperReplay measures a duplicate replayed through a
// generated wrapper from the memory store.
func BenchmarkMemWrapperReplay(b *testing.B) {
	rt, _ := memBench(b)
	svc := benchsvc.NewIdempotentPayments(benchsvc.Direct{}, rt)
	ctx := context.Background()
	req := benchsvc.ChargeRequest{Key: "key", Merchant: "m1", Account: "acct", Cents: 100}
	if _, err := svc.Charge(ctx, req); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := svc.Charge(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// liveRecords is how many finished records the memory benchmarks keep
// live in the store they measure: a first call's claim then indexes into,
// and the collector marks, the heap of a store that has served a million
// calls, not one that fits in a cache.
const liveRecords = 1_000_000

// live is the store the memory benchmarks share, filled once per process
// through runtime.Do (so each record holds what a call leaves), and keys,
// the count of first-call keys handed out from it.
var live struct {
	once  sync.Once
	store *memstore.Store
	keys  int
}

// memBench returns a runtime on the memory store holding liveRecords
// records and b.N keys it has never seen (for first calls), and reports
// allocations. It collects the garbage of the fill before the benchmark
// runs: what the collector does during the timed loop is the loop's own.
func memBench(b *testing.B) (*runtime.Runtime, []string) {
	b.Helper()
	live.once.Do(func() {
		s := memstore.New()
		rt, err := runtime.New(s)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for i := range liveRecords {
			_, err := runtime.Do(ctx, rt, runtime.Call[benchReq, benchResp]{Operation: "Payments.Charge",
				Key: "live-" + strconv.Itoa(i), Request: benchReq{"acct", int64(i)}, Effect: benchEffect})
			if err != nil {
				b.Fatal(err)
			}
		}
		live.store = s
	})
	if n := live.store.Len(); n < liveRecords {
		b.Fatalf("the live set holds %d records, want %d", n, liveRecords)
	}
	rt, err := runtime.New(live.store)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(live.keys)
		live.keys++
	}
	goruntime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	return rt, keys
}

type (
	benchItem struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	// benchOrder's JSON tells every two orders apart: fingerprinted by
	// the SHA-256 of its JSON.
	benchOrder struct {
		Account string      `json:"account"`
		Cents   int64       `json:"cents"`
		Items   []benchItem `json:"items"`
		Note    string      `json:"note,omitempty"`
	}
	// benchOrderOmit is benchOrder with omitempty on the slice: nil and
	// empty encode alike, so each value is checked (a non-empty slice is
	// told apart by its JSON).
	benchOrderOmit struct {
		Account string      `json:"account"`
		Cents   int64       `json:"cents"`
		Items   []benchItem `json:"items,omitempty"`
		Note    string      `json:"note,omitempty"`
	}
	// benchOrderCard has a field JSON leaves out: fingerprinted by the
	// canonical encoding.
	benchOrderCard struct {
		Account string      `json:"account"`
		Cents   int64       `json:"cents"`
		Items   []benchItem `json:"items"`
		Card    string      `json:"-"`
	}
)

// BenchmarkEncodeRequest compares, in one run, the cost of encoding and
// fingerprinting a request whose JSON tells it apart (json), one whose
// value is checked first (omitempty) and one fingerprinted by the
// canonical encoding (canonical): run with -bench EncodeRequest and read
// the ratios.
func BenchmarkEncodeRequest(b *testing.B) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	items := []benchItem{{"sku-1", 2}, {"sku-2", 1}, {"sku-3", 5}}
	b.Run("json", func(b *testing.B) { benchEncode(b, rt, benchOrder{"acct", 100, items, ""}) })
	b.Run("omitempty", func(b *testing.B) { benchEncode(b, rt, benchOrderOmit{"acct", 100, items, ""}) })
	b.Run("canonical", func(b *testing.B) { benchEncode(b, rt, benchOrderCard{"acct", 100, items, "4242"}) })
}

func benchEncode[Req any](b *testing.B, rt *runtime.Runtime, req Req) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := runtime.EncodeRequest(rt, req, nil); err != nil {
			b.Fatal(err)
		}
	}
}
