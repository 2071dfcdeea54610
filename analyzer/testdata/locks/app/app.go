// Package app calls the repository through its interface.
package app

import (
	"context"
	"database/sql"

	"example.com/locks/ports"
)

type Service struct {
	DB   *sql.DB
	Repo ports.Repo
}

// Pay locks the order, checks its state under the lock (an early commit
// on a path that returns), then writes the order and its invoice.
func (s *Service) Pay(ctx context.Context, id string) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	o, err := s.Repo.LockOrder(ctx, tx, id)
	if err != nil {
		return err
	}
	if o.Status == "PAID" {
		return tx.Commit()
	}
	if err := s.Repo.SetOrderStatus(ctx, tx, o.ID, "PAID"); err != nil {
		return err
	}
	if err := s.Repo.SetInvoiceStatus(ctx, tx, o.InvoiceID, "PAID"); err != nil {
		return err
	}
	if err := s.Repo.SetShipmentStatus(ctx, tx, o.ShipmentID, "READY"); err != nil {
		return err
	}
	return tx.Commit()
}

// Ship writes the shipment with no lock held.
func (s *Service) Ship(ctx context.Context, shipmentID string) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := s.Repo.SetShipmentStatus(ctx, tx, shipmentID, "SHIPPED"); err != nil {
		return err
	}
	return tx.Commit()
}

// Refund locks the order but does not look at its state.
func (s *Service) Refund(ctx context.Context, id string) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	o, err := s.Repo.LockOrder(ctx, tx, id)
	if err != nil {
		return err
	}
	if err := s.Repo.SetRefundStatus(ctx, tx, o.ID, "REFUNDED"); err != nil {
		return err
	}
	return tx.Commit()
}

// Note checks the state under the lock, commits, then writes.
func (s *Service) Note(ctx context.Context, id string) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	o, err := s.Repo.LockOrder(ctx, tx, id)
	if err != nil {
		return err
	}
	if o.Status != "PAID" {
		return nil
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return s.Repo.SetNoteStatus(ctx, tx, o.ID, "NOTED")
}

// Audit locks the order on the pool, checks its state, then writes.
func (s *Service) Audit(ctx context.Context, id string) error {
	o, err := s.Repo.LockOrderOnPool(ctx, s.DB, id)
	if err != nil {
		return err
	}
	if o.Status != "PAID" {
		return nil
	}
	db := s.DB
	return s.Repo.SetAuditStatus(ctx, db, o.ID, "AUDITED")
}
