package pgstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
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

// BenchmarkPGBaselineInsert is one autocommitted INSERT of a comparable row:
// what a hand-written "insert the key, then act" costs, for ratios.
func BenchmarkPGBaselineInsert(b *testing.B) {
	p := testPool(b)
	ctx := context.Background()
	table := fmt.Sprintf("bench_baseline_%d", time.Now().UnixNano())
	if _, err := p.Exec(ctx, "CREATE UNLOGGED TABLE "+table+" (k text PRIMARY KEY, v bytea)"); err != nil {
		b.Fatal(err)
	}
	defer func() { _, _ = p.Exec(ctx, "DROP TABLE "+table) }()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Exec(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", strconv.Itoa(i), []byte(`{"account":"acct","cents":100}`)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPGDoFirstCall is the happy path on PostgreSQL: claim, effect,
// complete (two statements).
func BenchmarkPGDoFirstCall(b *testing.B) {
	rt, err := runtime.New(pgstore.New(testPool(b)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), fmt.Sprintf("bench/%d", time.Now().UnixNano()))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, err := runtime.Do(ctx, rt, runtime.Call[benchReq, benchResp]{Operation: "Payments.Charge", Key: "k" + strconv.Itoa(i),
			Request: benchReq{"acct", 100}, Effect: benchEffect})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPGDoReplay is a duplicate replayed from PostgreSQL (one statement).
func BenchmarkPGDoReplay(b *testing.B) {
	rt, err := runtime.New(pgstore.New(testPool(b)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), fmt.Sprintf("bench/%d", time.Now().UnixNano()))
	call := runtime.Call[benchReq, benchResp]{Operation: "Payments.Charge", Key: "k", Request: benchReq{"acct", 100}, Effect: benchEffect}
	if _, err := runtime.Do(ctx, rt, call); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := runtime.Do(ctx, rt, call); err != nil {
			b.Fatal(err)
		}
	}
}
