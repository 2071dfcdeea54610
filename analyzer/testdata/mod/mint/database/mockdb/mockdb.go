// Package mockdb is a test double whose Commit does nothing (not what
// production binds: the command does not count it as an implementation).
package mockdb

import (
	"context"

	"github.com/jackc/pgx/v5"

	"example.com/orm/mint/database"
)

type MockDB struct{ Quotes map[string]database.Quote }

func (m *MockDB) GetTx(ctx context.Context) (pgx.Tx, error)     { return nil, nil }
func (m *MockDB) Commit(ctx context.Context, tx pgx.Tx) error   { return nil }
func (m *MockDB) Rollback(ctx context.Context, tx pgx.Tx) error { return nil }
func (m *MockDB) GetQuote(tx pgx.Tx, id string) (database.Quote, error) {
	return m.Quotes[id], nil
}
func (m *MockDB) SetState(tx pgx.Tx, id, state string) error { return nil }
func (m *MockDB) ChangeCheckingID(tx pgx.Tx, id, checkingID string) error {
	return nil
}
