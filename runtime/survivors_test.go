package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// One RunOnce deletes every expired record, however many batches that
// takes.
func TestSweeperRunOnceEmptiesEveryBatch(t *testing.T) {
	rt, err := runtime.New(memstore.New(), runtime.WithTTL(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := reviewCtx()
	const records = 7
	for i := range records {
		if _, err := runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "Sweep.Batches", Key: fmt.Sprint("k", i), Request: reviewReq{i},
			Effect: func(context.Context, reviewReq) (string, error) { return "ok", nil }}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // every record's TTL is over
	sw, err := runtime.NewSweeper(rt, runtime.SweepBatch(2))
	if err != nil {
		t.Fatal(err)
	}
	n, err := sw.RunOnce(ctx)
	if err != nil || n != records {
		t.Fatalf("RunOnce with batches of 2: %d deleted, %v; want all %d", n, err, records)
	}
}

// plainCodec is a Codec that is not JSONCodec (the runtime calls it
// through the interface).
type plainCodec struct{}

func (plainCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (plainCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// With a custom Codec, Call.Fingerprint decides what is the same request:
// another request with the same fingerprint replays.
func TestCustomCodecKeepsCallFingerprint(t *testing.T) {
	rt, err := runtime.New(memstore.New(), runtime.WithCodec(plainCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := reviewCtx()
	runs := 0
	call := func(cents int) (string, error) {
		return runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "Codec.Fp", Key: "k", Request: reviewReq{cents},
			Fingerprint: []byte("order-42"),
			Effect:      func(context.Context, reviewReq) (string, error) { runs++; return fmt.Sprint("charged ", cents), nil }})
	}
	first, err := call(100)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := call(250); err != nil || again != first {
		t.Fatalf("same fingerprint, another request: %q, %v; want the replay %q", again, err, first)
	}
	if runs != 1 {
		t.Fatalf("effect ran %d times", runs)
	}
	if _, err := runtime.Do(ctx, rt, runtime.Call[reviewReq, string]{Operation: "Codec.Fp", Key: "k", Request: reviewReq{100},
		Fingerprint: []byte("order-43"), Effect: func(context.Context, reviewReq) (string, error) { return "", nil }}); !errors.Is(err, runtime.ErrKeyReused) {
		t.Fatalf("another fingerprint: %v, want ErrKeyReused", err)
	}
}
