package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// BenchmarkStoreFirstCall measures the store's share of a first call: a
// claim of a new identity and its transition to SUCCESS.
func BenchmarkStoreFirstCall(b *testing.B) {
	s := memstore.New()
	ctx := context.Background()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	fp, req, resp := make([]byte, 32), []byte(`{"account":"acct","cents":100}`), []byte(`{"charge_id":"ch_1","cents":100}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ { // not b.Loop: every iteration needs a new key
		id := runtime.Identity{Operation: "Payments.Charge", Key: keys[i]}
		res, err := s.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: req, Owner: "w1", Lease: time.Minute})
		if err != nil || !res.Claimed {
			b.Fatal(res.Claimed, err)
		}
		if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w1",
			Version: res.Record.Version, To: runtime.StateSuccess, TTL: time.Hour, Response: resp, Token: "w1#1"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreReplay measures the store's share of a replay: a claim
// that finds a finished record.
func BenchmarkStoreReplay(b *testing.B) {
	s := memstore.New()
	ctx := context.Background()
	id := runtime.Identity{Operation: "Payments.Charge", Key: "key"}
	p := runtime.ClaimParams{ID: id, Fingerprint: make([]byte, 32), Request: []byte(`{}`), Owner: "w1", Lease: time.Minute}
	res, err := s.Claim(ctx, p)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, Owner: "w1",
		Version: res.Record.Version, To: runtime.StateSuccess, TTL: time.Hour, Response: []byte(`{}`), Token: "w1#1"}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := s.Claim(ctx, p); err != nil || res.Claimed {
			b.Fatal(res.Claimed, err)
		}
	}
}
