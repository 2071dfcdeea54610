// Package postgres implements domain.Store on pgx.
package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/orm/payout/domain"
)

// Store is the PostgreSQL store.
type Store struct{ pool *pgxpool.Pool }

// New returns a store on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// UpdateDisbursement writes d's status, provider reference and reason.
func (s *Store) UpdateDisbursement(ctx context.Context, d *domain.Disbursement) error {
	query := "UPDATE disbursements SET status = $2, provider_reference = $3, failure_reason = $4, updated_at = now() WHERE reference = $1"
	_, err := s.pool.Exec(ctx, query, d.Reference, d.Status, d.ProviderRef, d.FailureReason)
	return err
}

// Record writes an update, the struct given by value.
func (s *Store) Record(ctx context.Context, u domain.Update) error {
	query := `UPDATE disbursements
	SET provider_id = $1,
	provider_reference = $2,
	status = $3,
	failure_code = $4
	WHERE reference = $5`
	_, err := s.pool.Exec(ctx, query, u.ProviderID, u.ProviderRef, u.Status, u.FailureCode, u.Reference)
	return err
}

const setStatusSQL = `UPDATE disbursements SET status = $1, updated_at = now() WHERE reference = $2`

// SetStatus writes a status.
func (s *Store) SetStatus(ctx context.Context, reference, value string) error {
	_, err := s.pool.Exec(ctx, setStatusSQL, value, reference)
	return err
}

// Touch records an attempt.
func (s *Store) Touch(ctx context.Context, d *domain.Disbursement) error {
	_, err := s.pool.Exec(ctx, "UPDATE disbursements SET updated_at = now() WHERE reference = $1", d.Reference)
	return err
}
