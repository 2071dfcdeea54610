package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

func checkOutput(t *testing.T, out string, want []string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			if strings.Contains(strings.Join(strings.Fields(l), " "), w) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

var chargeLines = []string{
	"charge pay-1 for acme -> ch_001 (25.00 EUR)",
	"retry pay-1 (duplicate: replayed, gateway not called) -> ch_001",
	"3 more duplicates of pay-1 at once (replayed) -> ch_001, ch_001, ch_001",
	"pay-1 again with another amount -> rejected, key reused",
	"pay-1 for merchant globex (another scope) -> ch_002",
	"charge pay-3 (the gateway's response times out) -> outcome unknown",
	"retry pay-3 (FindCharge reconciles: it happened) -> ch_003",
	"pay-4 while its first call is in flight -> in progress",
	"retry pay-4 after the first call finished (replayed) -> ch_004",
	"charge pay-5 (times out too) -> outcome unknown",
	"reconciler pass (asks FindCharge about UNKNOWN records) -> 1 converged to SUCCESS",
	"retry pay-5 later (replayed, converged) -> ch_005 (9.90 EUR)",
	"14 charge requests, 5 calls to the gateway, 5 charges",
}

func TestMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	if err := run(ctx, &out, ""); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkOutput(t, out.String(), append(chargeLines, "on the memory store", "orders with a local effect need PostgreSQL"))
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the example took %v; it should finish in a few seconds", d)
	}
}

func TestPostgres(t *testing.T) {
	dsn := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, dsn); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkOutput(t, out.String(), append(chargeLines,
		"on PostgreSQL",
		"create order-1 (committed) -> order #",
		"retry order-1 in a new transaction (replayed) -> order #",
		"retry order-2 (nothing was recorded: created) -> order #",
		"rows in example_orders for order-1 and order-2 -> 2",
	))
}
