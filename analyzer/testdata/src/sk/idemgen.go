package sk

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"sksvc"
)

// 7. The key field of an //idem:op request, in a literal.
func handle(ctx context.Context, pay sksvc.Payments, amount int64) error {
	_, err := pay.Charge(ctx, sksvc.ChargeRequest{IdempotencyKey: uuid.NewString(), Amount: amount}) // want `ChargeRequest.IdempotencyKey, the idempotency key of the //idem:op Payments.Charge \(key=req.IdempotencyKey\), is minted on the server \(uuid.NewString\(\) at idemgen\.go:14:64\)`
	return err
}

// A fresh id in another field is fine.
func handleClientKey(ctx context.Context, pay sksvc.Payments, hr *http.Request, amount int64) error {
	_, err := pay.Charge(ctx, sksvc.ChargeRequest{IdempotencyKey: hr.Header.Get("Idempotency-Key"), OrderID: uuid.NewString(), Amount: amount})
	return err
}

// 8. Assigned to the key field.
func handleAssign(ctx context.Context, pay sksvc.Payments, req sksvc.ChargeRequest) error {
	req.IdempotencyKey = uuid.Must(uuid.NewV7()).String() // want `ChargeRequest.IdempotencyKey, the idempotency key of the //idem:op Payments.Charge`
	_, err := pay.Charge(ctx, req)
	return err
}

func handleAssignClient(ctx context.Context, pay sksvc.Payments, hr *http.Request, req sksvc.ChargeRequest) error {
	req.IdempotencyKey = hr.Header.Get("Idempotency-Key")
	_, err := pay.Charge(ctx, req)
	return err
}

// 9. A nested key path (key=req.Meta.RequestID).
func refund(ctx context.Context, pay sksvc.Payments, req sksvc.RefundRequest) error {
	req.Meta.RequestID = uuid.NewString() // want `RefundRequest.Meta.RequestID, the idempotency key of the //idem:op Payments.Refund \(key=req.Meta.RequestID\)`
	_, err := pay.Refund(ctx, req)
	return err
}

// ChargeRequest.Meta.RequestID is not Charge's key.
func chargeMeta(ctx context.Context, pay sksvc.Payments, req sksvc.ChargeRequest) error {
	req.Meta.RequestID = uuid.NewString()
	_, err := pay.Charge(ctx, req)
	return err
}
