// Package firestorerepo implements domain.OrderRepo on Firestore.
package firestorerepo

import (
	"context"

	"cloud.google.com/go/firestore"

	"example.com/orm/corpus/domain"
)

type Orders struct{ Client *firestore.Client }

func (r *Orders) UpdateOrder(ctx context.Context, id string, fn func(ctx context.Context, o *domain.Order) (*domain.Order, error)) error {
	ref := r.Client.Collection("orders").Doc(id)
	return r.Client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(ref)
		if err != nil {
			return err
		}
		var o domain.Order
		if err := snap.DataTo(&o); err != nil {
			return err
		}
		no, err := fn(ctx, &o)
		if err != nil {
			return err
		}
		return tx.Set(ref, no)
	})
}
