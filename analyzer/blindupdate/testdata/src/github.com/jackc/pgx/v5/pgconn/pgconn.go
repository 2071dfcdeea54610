// Package pgconn is a minimal stub of github.com/jackc/pgx/v5/pgconn.
package pgconn

type CommandTag struct{ s string }

func (ct CommandTag) RowsAffected() int64 { return 0 }
func (ct CommandTag) String() string      { return ct.s }
