//go:build goexperiment.jsonv2

//lint:file-ignore SA5008 the test exercises a tag json/v2 reads otherwise

package runtime_test

// Adversarial review 19: with GOEXPERIMENT=jsonv2 (a Go 1.25+ experiment,
// under which encoding/json is built on encoding/json/v2), json.Marshal
// writes invalid UTF-8 as the raw U+FFFD character where jsonfast writes
// the escape \ufffd, and reads struct tags by v2's rules (`json:"a\"b"`
// names the field "a", where jsonfast and v1 fall back to the field's
// name). The default codec's fast path then no longer writes json.Marshal's
// bytes: runtime.Do's fingerprint differs from the SHA-256 of
// json.Marshal (what DoTx and earlier releases store), so a record written
// by one answers the other's retry of the same request with ErrKeyReused
// (see TestReview19DoTxAndDoShareRecords in pgstore, which fails likewise
// under the experiment).
//
// Run: GOEXPERIMENT=jsonv2 go test -run TestReview19JSONv2 ./runtime/

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type r19V2Tag struct {
	Bad string `json:"a\"b"`
}

func TestReview19JSONv2FingerprintIsJSONMarshal(t *testing.T) {
	r19V2Check(t, "invalid UTF-8", "\xff\xfe ok")
	r19V2Check(t, "tag json treats otherwise", r19V2Tag{Bad: "b"})
}

func r19V2Check[T any](t *testing.T, name string, req T) {
	t.Helper()
	ctx := runtime.WithScope(context.Background(), "r19v2")
	st := memstore.New()
	rt, err := runtime.New(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.Do(ctx, rt, runtime.Call[T, string]{Operation: "R19.V2", Key: "k", Request: req,
		Effect: func(context.Context, T) (string, error) { return "ok", nil }}); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Get(ctx, runtime.Identity{Scope: "r19v2", Operation: "R19.V2", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(req)
	sum := sha256.Sum256(want)
	if string(rec.Fingerprint) != string(sum[:]) {
		t.Errorf("%s: runtime.Do stored %s (its fingerprint is not SHA-256 of json.Marshal's %s): DoTx's record of the same request, or an earlier release's, answers ErrKeyReused",
			name, rec.Request, want)
	}
}
