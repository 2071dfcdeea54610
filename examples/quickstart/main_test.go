package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{
		"retry key-1 (replayed, not charged again) -> ch_001",
		"key-1 with another amount -> error: idem: idempotency key reused",
		"charge key-3 (gateway times out) -> error: idem: outcome unknown",
		"retry key-3 (query finds the charge) -> ch_003",
		"9 requests, 3 charges at the gateway",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
