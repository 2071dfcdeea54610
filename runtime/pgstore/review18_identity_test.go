package pgstore_test

// Adversarial review 18 of pgstore's identity checks: the claim's read
// (the Get query, which now returns the identity and is checked against the
// one asked for), the insert, the batched claim and Get must each return the
// record of the identity asked for, however alike two identities look, in
// every order of the claim's statements and with group commit.

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// Promise: each identity has its own record. Schedule: 12 look-alike
// identities (case, a trailing space, where a separator falls, a brace,
// the empty scope, NFC against NFD), each with its own fingerprint and
// owner, claimed at once (first calls: the insert, or the batch), claimed
// again at once (replays: the read, or the batch's existing-record row),
// then read with Get; read-first, insert-first and group commit.
func TestReview18LookalikeIdentitiesOwnRecords(t *testing.T) {
	for _, mode := range []string{"read-first", "insert-first", "group"} {
		t.Run(mode, func(t *testing.T) {
			var s *pgstore.Store
			switch mode {
			case "group":
				s = pgstore.New(testPool(t), pgstore.WithGroupCommit(0))
			default:
				s = pgstore.New(testPool(t))
				pgstore.SetClaimOrder(s, map[string]int{"read-first": 1, "insert-first": -1}[mode])
			}
			u := fmt.Sprint(time.Now().UnixNano())
			ids := []runtime.Identity{
				{Scope: "t" + u, Operation: "Op", Key: "k"},
				{Scope: "T" + u, Operation: "Op", Key: "k"},
				{Scope: "t" + u + " ", Operation: "Op", Key: "k"},
				{Scope: "", Operation: "Op" + u, Key: "k"},
				{Scope: "t" + u, Operation: "op", Key: "k"},
				{Scope: "t" + u, Operation: "Op", Key: "K"},
				{Scope: u + "a:b", Operation: "c", Key: "d"},
				{Scope: u + "a", Operation: "b:c", Key: "d"},
				{Scope: u + "a", Operation: "b", Key: "c:d"},
				{Scope: "{" + u + "}", Operation: "b", Key: "d"},
				{Scope: u + "\u00e9", Operation: "Op", Key: "k"},
				{Scope: u + "e\u0301", Operation: "Op", Key: "k"},
			}
			ctx := context.Background()
			check := func(what string, i int, rec runtime.Record) {
				t.Helper()
				if rec.ID != ids[i] || !bytes.Equal(rec.Fingerprint, []byte(fmt.Sprint("fp", i))) || rec.Owner != fmt.Sprint("o", i) {
					t.Errorf("%s of identity %d %q: the record of %q, fingerprint %q, owner %q", what, i, ids[i], rec.ID, rec.Fingerprint, rec.Owner)
				}
			}
			for pass, want := range []bool{true, false} {
				together(len(ids), func(i int) {
					res, err := s.Claim(ctx, runtime.ClaimParams{ID: ids[i], Fingerprint: []byte(fmt.Sprint("fp", i)), Owner: fmt.Sprint("o", i), Lease: time.Hour})
					if err != nil || res.Claimed != want {
						t.Errorf("claim %d of identity %d: claimed %v, %v; want claimed %v", pass, i, res.Claimed, err, want)
						return
					}
					check(fmt.Sprint("claim ", pass), i, res.Record)
				})
			}
			for i := range ids {
				rec, err := s.Get(ctx, ids[i])
				if err != nil {
					t.Errorf("get %d: %v", i, err)
					continue
				}
				check("get", i, rec)
			}
		})
	}
}
