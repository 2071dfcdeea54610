// Package bucaller calls sqlc-generated query methods of busqlc.
package bucaller

import (
	"context"
	"errors"

	"busqlc"
)

var errLost = errors.New("lost the race")

// 18. An :exec query: the generated method drops the count.
func pay(ctx context.Context, q *busqlc.Queries, id string) error {
	return q.UpdatePaymentStatus(ctx, busqlc.UpdatePaymentStatusParams{ID: id, Status: "PAID"}) // want `\(\*busqlc.Queries\).UpdatePaymentStatus \(called at bucaller\.go:15:9\) runs the generated query updatePaymentStatus \("UPDATE payments SET status = \$2 WHERE id = \$1"\)`
}

func payCAS(ctx context.Context, q *busqlc.Queries, id string) error {
	return q.TransitionPayment(ctx, busqlc.TransitionPaymentParams{ID: id, From: "PROCESSING", To: "PAID"})
}

// 19. An :execrows query whose count the caller drops.
func done(ctx context.Context, q *busqlc.Queries, id string) error {
	_, err := q.MarkOrderDone(ctx, id) // want `\(\*busqlc.Queries\).MarkOrderDone \(called at bucaller\.go:24:12\) runs the generated query markOrderDone .* and the count it returns is dropped here`
	return err
}

func doneChecked(ctx context.Context, q *busqlc.Queries, id string) error {
	n, err := q.MarkOrderDone(ctx, id)
	if err == nil && n != 1 {
		return errLost
	}
	return err
}

// 20. An :execresult query whose sql.Result the caller drops.
func closeIt(ctx context.Context, q *busqlc.Queries, id string) {
	q.CloseOrder(ctx, id) // want `\(\*busqlc.Queries\).CloseOrder \(called at bucaller\.go:38:2\) runs the generated query closeOrder`
}

func closeChecked(ctx context.Context, q *busqlc.Queries, id string) error {
	res, err := q.CloseOrder(ctx, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errLost
	}
	return nil
}
