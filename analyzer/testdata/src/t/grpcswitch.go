package t

import (
	"context"
	"database/sql"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// 24'. a gRPC error switched on codes that say the request was refused
// (InvalidArgument, FailedPrecondition, OutOfRange) before the failure is
// written; every other code, a timeout among them, is left pending.
func grpcDefiniteCodes(ctx context.Context, db *sql.DB, pc PaymentClient, id string) error {
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: id}); err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
			return setState(ctx, db, id, StateFailed)
		}
		return err
	}
	return setState(ctx, db, id, StateDone)
}

// 24'b. the same with an if.
func grpcDefiniteIf(ctx context.Context, db *sql.DB, pc PaymentClient, id string) error {
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: id}); err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return setState(ctx, db, id, StateFailed)
		}
		return err
	}
	return setState(ctx, db, id, StateDone)
}

// 24. Internal is not a refusal: the server may have done the work.
func grpcInternalCode(ctx context.Context, db *sql.DB, pc PaymentClient, id string) error {
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: id}); err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.Internal:
			return setState(ctx, db, id, StateFailed) // want `\(t\.PaymentClient\)\.Charge.*writes a FAILED status`
		}
		return err
	}
	return setState(ctx, db, id, StateDone)
}

// 25. the failure is written on every code but the refusal.
func grpcNotDefinite(ctx context.Context, db *sql.DB, pc PaymentClient, id string) error {
	if _, err := pc.Charge(ctx, &ChargeRequest{ID: id}); err != nil {
		if status.Code(err) != codes.InvalidArgument {
			return setState(ctx, db, id, StateFailed) // want `\(t\.PaymentClient\)\.Charge.*writes a FAILED status`
		}
		return err
	}
	return setState(ctx, db, id, StateDone)
}
