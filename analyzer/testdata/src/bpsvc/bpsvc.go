package bpsvc // want package:`services\(Ledger\{ops: Post\(req.IdempotencyKey\); skip: ; wrapper: \} Payments\{ops: Charge\(req.IdempotencyKey\),Refund\(req.IdempotencyKey\); skip: Find; wrapper: NewIdempotentPayments\}\)`

// bpsvc declares idemgen services; Payments has its generated wrapper,
// Ledger has none (it was never generated).

import "context"

type ChargeRequest struct {
	IdempotencyKey string
	Amount         int64
}

type Receipt struct{ ID string }

//idem:service
type Payments interface {
	//idem:op key=req.IdempotencyKey effect=remote
	Charge(ctx context.Context, req ChargeRequest) (Receipt, error)
	//idem:op key=req.IdempotencyKey
	Refund(ctx context.Context, req ChargeRequest) (Receipt, error)
	//idem:skip
	Find(ctx context.Context, req ChargeRequest) (Receipt, error)
}

//idem:service
type Ledger interface {
	//idem:op key=req.IdempotencyKey
	Post(ctx context.Context, req ChargeRequest) (Receipt, error)
}
