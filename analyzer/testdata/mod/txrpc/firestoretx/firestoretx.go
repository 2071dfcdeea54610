// Package firestoretx: Firestore RunTransaction, directly and through a
// repository method that hands its callback to it (a runner inferred
// through a layer).
package firestoretx

import (
	"context"

	"cloud.google.com/go/firestore"

	"example.com/orm/netx"
)

type Order struct {
	ID    string
	State string
}

func Direct(ctx context.Context, client *firestore.Client, id string) error {
	return client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		ref := client.Collection("orders").Doc(id)
		if err := tx.Update(ref, []firestore.Update{{Path: "state", Value: "PROCESSING"}}); err != nil {
			return err
		}
		return netx.Notify(ctx, id) // want `netx.Notify .*while the database transaction`
	})
}

// Repo wraps the client.
type Repo struct{ client *firestore.Client }

// UpdateOrder reads the order, lets fn change it and writes it back, in one
// transaction.
func (r *Repo) UpdateOrder(ctx context.Context, id string, fn func(ctx context.Context, o *Order) (*Order, error)) error {
	ref := r.client.Collection("orders").Doc(id)
	return r.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snap, err := tx.Get(ref)
		if err != nil {
			return err
		}
		var o Order
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

func Ship(ctx context.Context, r *Repo, id string) error {
	return r.UpdateOrder(ctx, id, func(ctx context.Context, o *Order) (*Order, error) {
		if err := netx.Notify(ctx, o.ID); err != nil { // want `netx.Notify .*while the database transaction`
			return nil, err
		}
		o.State = "SHIPPED"
		return o, nil
	})
}

// ShipAfter notifies after the transaction: silent.
func ShipAfter(ctx context.Context, r *Repo, id string) error {
	if err := r.UpdateOrder(ctx, id, func(ctx context.Context, o *Order) (*Order, error) {
		o.State = "SHIPPED"
		return o, nil
	}); err != nil {
		return err
	}
	return netx.Notify(ctx, id)
}
