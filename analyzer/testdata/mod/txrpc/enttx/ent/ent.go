// Package ent has the shape of ent's generated client (entc output, cut to
// what the test uses): Client.Tx begins a transaction on the real
// entgo.io/ent dialect driver and returns a *Tx with Commit and Rollback.
// Generating the real client needs entc at test time, so the generated
// shape is written out here.
package ent

import (
	"context"

	"entgo.io/ent/dialect"
)

type config struct{ driver dialect.Driver }

// Client is the client holding all of the schema's builders.
type Client struct {
	config
	Payment *PaymentClient
}

// PaymentClient is a client for the Payment schema.
type PaymentClient struct{ config }

// PaymentUpdateOne updates one payment.
type PaymentUpdateOne struct {
	config
	status string
}

// UpdateOneID returns an update builder for the given id.
func (c *PaymentClient) UpdateOneID(id int) *PaymentUpdateOne {
	return &PaymentUpdateOne{config: c.config}
}

// SetStatus sets the "status" field.
func (u *PaymentUpdateOne) SetStatus(s string) *PaymentUpdateOne { u.status = s; return u }

// Exec executes the query.
func (u *PaymentUpdateOne) Exec(ctx context.Context) error {
	var res any
	return u.driver.Exec(ctx, "UPDATE payments SET status = ?", []any{u.status}, &res)
}

// Tx is a transactional client.
type Tx struct {
	config
	Payment *PaymentClient
	tx      dialect.Tx
}

// Tx returns a new transactional client.
func (c *Client) Tx(ctx context.Context) (*Tx, error) {
	tx, err := c.driver.Tx(ctx)
	if err != nil {
		return nil, err
	}
	cfg := config{driver: &txDriver{tx: tx}}
	return &Tx{config: cfg, Payment: &PaymentClient{config: cfg}, tx: tx}, nil
}

// Commit commits the transaction.
func (tx *Tx) Commit() error { return tx.tx.Commit() }

// Rollback rollbacks the transaction.
func (tx *Tx) Rollback() error { return tx.tx.Rollback() }

type txDriver struct {
	dialect.Driver
	tx dialect.Tx
}
