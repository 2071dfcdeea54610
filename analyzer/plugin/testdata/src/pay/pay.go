package pay

import "context"

type Req struct{ Key string }

//idem:service
type Payments interface {
	//idem:op key=req.Key
	Charge(ctx context.Context, req Req) error
}

// NewIdempotentPayments stands for the generated wrapper.
func NewIdempotentPayments(inner Payments) Payments { return inner }
