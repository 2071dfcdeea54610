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
	for _, want := range []string{
		"charge 1000 -> ch_001 (replayed)",
		"another charge 1000 (a new logical call, a new key) -> ch_002\n",
		"order-42 retried by the application -> ch_003 (replayed)",
		"order-42 with another amount -> FailedPrecondition KEY_REUSED",
		"3 charges made",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
