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

// otherRecord answers every claim with the record of another identity, as a
// store whose connection fell out of step with its requests would.
type otherRecord struct {
	runtime.Store
	other runtime.Identity
}

func (s otherRecord) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, runtime.ClaimParams{ID: s.other, Fingerprint: p.Fingerprint, Request: p.Request, Owner: p.Owner, Lease: p.Lease})
	return runtime.ClaimResult{Record: res.Record}, err
}

// TestAnotherIdentitysRecordIsNeverReplayed: a store that answers a claim
// with another identity's record (same operation, key and request, another
// scope) gets an error, not that record's outcome replayed.
func TestAnotherIdentitysRecordIsNeverReplayed(t *testing.T) {
	store := memstore.New()
	plain, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	call := runtime.Call[string, string]{Operation: "Pay", Key: "k", Request: "r",
		Effect: func(context.Context, string) (string, error) { return "tenant-a's receipt", nil }}
	if _, err := runtime.Do(runtime.WithScope(context.Background(), "tenant-a"), plain, call); err != nil {
		t.Fatal(err)
	}
	crossed, err := runtime.New(otherRecord{Store: store, other: runtime.Identity{Scope: "tenant-a", Operation: "Pay", Key: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := runtime.Do(runtime.WithScope(context.Background(), "tenant-b"), crossed, call)
	if err == nil || got != "" {
		t.Fatalf("tenant-b got %q, %v; want an error, never tenant-a's outcome", got, err)
	}
}
