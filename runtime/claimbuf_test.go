package runtime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type claimBufReq struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// TestClaimBufferReusedRecordsKeepTheirRequest: the runtime encodes a
// claim's request and fingerprint in a pooled buffer and reuses it for the
// next call; every record keeps its own request and fingerprint, and
// replays to its own duplicates.
func TestClaimBufferReusedRecordsKeepTheirRequest(t *testing.T) {
	store := memstore.New()
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	effect := func(_ context.Context, r claimBufReq) (string, error) { return r.Account, nil }
	accounts := []string{"acct-a", "acct-b", "acct-c"}
	for i, a := range accounts {
		if _, err := runtime.Do(ctx, rt, runtime.Call[claimBufReq, string]{Operation: "Buf.Charge", Key: a,
			Request: claimBufReq{a, int64(i)}, Effect: effect}); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range accounts {
		rec, err := store.Get(ctx, runtime.Identity{Operation: "Buf.Charge", Key: a})
		if err != nil {
			t.Fatal(err)
		}
		want := claimBufReq{a, int64(i)}
		wantFP, wantReq, err := runtime.EncodeRequest(rt, want, nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(rec.Request) != string(wantReq) || string(rec.Fingerprint) != string(wantFP) {
			t.Errorf("record %s holds request %s (fingerprint %x), want %s (%x)", a, rec.Request, rec.Fingerprint, wantReq, wantFP)
		}
		got, err := runtime.Do(ctx, rt, runtime.Call[claimBufReq, string]{Operation: "Buf.Charge", Key: a,
			Request: want, Effect: func(context.Context, claimBufReq) (string, error) { return "", errors.New("ran again") }})
		if err != nil || got != a {
			t.Errorf("duplicate of %s: %q, %v; want %q replayed", a, got, err, a)
		}
	}
}

// keepingStore keeps the slices of the claims it fails, as a claim cut by a
// timeout and still running in a store would read them.
type keepingStore struct {
	runtime.Store
	kept [][]byte
}

var errClaimCut = errors.New("claim cut")

func (s *keepingStore) Claim(ctx context.Context, p runtime.ClaimParams) (runtime.ClaimResult, error) {
	s.kept = append(s.kept, p.Request, p.Fingerprint)
	return runtime.ClaimResult{}, errClaimCut
}

// TestFailedClaimBufferNotReused: the buffer of a claim that returned an
// error is never reused (that claim may still be running in the store).
func TestFailedClaimBufferNotReused(t *testing.T) {
	store := &keepingStore{Store: memstore.New()}
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := func(a string) {
		_, err := runtime.Do(ctx, rt, runtime.Call[claimBufReq, string]{Operation: "Buf.Charge", Key: a,
			Request: claimBufReq{a, 1}, Effect: func(context.Context, claimBufReq) (string, error) { return "", nil }})
		if !errors.Is(err, errClaimCut) {
			t.Fatalf("Do = %v, want the claim's error", err)
		}
	}
	call("acct-a")
	first := string(store.kept[0])
	for range 10 {
		call("acct-zzzzzz")
	}
	if string(store.kept[0]) != first {
		t.Fatalf("a failed claim's request became %s after later calls, was %s", store.kept[0], first)
	}
}
