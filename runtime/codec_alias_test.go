package runtime_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// aliasCodec keeps slices of what it decodes: Unmarshal into a *[]byte
// hands back data itself.
type aliasCodec struct{}

func (aliasCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return json.Marshal(v)
}

func (aliasCodec) Unmarshal(data []byte, v any) error {
	if p, ok := v.(*[]byte); ok {
		*p = data
		return nil
	}
	return json.Unmarshal(data, v)
}

// TestCustomCodecResultsAreTheCallers: a caller that changes a replayed
// result in place, decoded by a Codec that keeps slices of its input, does
// not change the record the next duplicate replays (memstore hands out the
// one copy it keeps).
func TestCustomCodecResultsAreTheCallers(t *testing.T) {
	rt, err := runtime.New(memstore.New(), runtime.WithCodec(aliasCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "t")
	call := runtime.Call[[]byte, []byte]{Operation: "Raw", Key: "k", Request: []byte("req"),
		Effect: func(context.Context, []byte) ([]byte, error) { return []byte("receipt-1"), nil }}
	if _, err := runtime.Do(ctx, rt, call); err != nil {
		t.Fatal(err)
	}
	got, err := runtime.Do(ctx, rt, call)
	if err != nil || string(got) != "receipt-1" {
		t.Fatalf("replay: %q, %v", got, err)
	}
	copy(got, "XXXXXXX") // the caller's own slice
	again, err := runtime.Do(ctx, rt, call)
	if err != nil || string(again) != "receipt-1" {
		t.Errorf("the next replay: %q, %v; want %q", again, err, "receipt-1")
	}
}
