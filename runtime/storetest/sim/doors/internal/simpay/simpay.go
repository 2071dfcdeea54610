// Package simpay is the annotated interface whose generated wrapper
// (ledger_idem.go, written by idemgen) the door simulation drives: one
// operation with a "did it happen?" query and one without.
//
// Regenerate with `go run ../../../../../../cmd/idemgen` in this directory
// (or `go generate`).
package simpay

//go:generate go run ../../../../../../cmd/idemgen

import (
	"context"

	"github.com/idemkit/idem/runtime"
)

// Request is what both operations take. Key is the idempotency key;
// the other fields make the fingerprint.
type Request struct {
	Key    string
	Amount int64
	// Large asks for a response larger than the store's record limit.
	Large bool `json:",omitempty"`
}

// Receipt is what both operations answer.
type Receipt struct {
	ID       string
	Identity string
	Amount   int64
	Pad      string `json:",omitempty"`
}

// Ledger is the simulated service.
//
//idem:service
type Ledger interface {
	//idem:op key=req.Key op=SimDoors.Charge reconcile=Find
	Charge(ctx context.Context, req Request) (Receipt, error)
	//idem:op key=req.Key op=SimDoors.Refund
	Refund(ctx context.Context, req Request) (Receipt, error)
	//idem:skip
	Find(ctx context.Context, req Request) (Receipt, runtime.Outcome, error)
}
