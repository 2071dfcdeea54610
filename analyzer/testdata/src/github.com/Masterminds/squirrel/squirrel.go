// Package squirrel is a stub of github.com/Masterminds/squirrel's update,
// delete, select and insert builders, with the upstream API shapes the rules model.
package squirrel

import (
	"context"
	"database/sql"
)

// BaseRunner runs statements.
type BaseRunner interface {
	Exec(query string, args ...interface{}) (sql.Result, error)
	Query(query string, args ...interface{}) (*sql.Rows, error)
}

// PlaceholderFormat rewrites placeholders.
type PlaceholderFormat interface {
	ReplacePlaceholders(sql string) (string, error)
}

type dollarFormat struct{}

func (dollarFormat) ReplacePlaceholders(sql string) (string, error) { return sql, nil }

// Dollar is the $n placeholder format.
var Dollar = dollarFormat{}

// Question is the ? placeholder format.
var Question = dollarFormat{}

// Eq is a map of column equalities.
type Eq map[string]interface{}

// StatementBuilderType builds statements.
type StatementBuilderType struct{ format PlaceholderFormat }

// StatementBuilder is the default statement builder.
var StatementBuilder = StatementBuilderType{}

// PlaceholderFormat sets the placeholder format.
func (b StatementBuilderType) PlaceholderFormat(f PlaceholderFormat) StatementBuilderType {
	return StatementBuilderType{format: f}
}

// Update begins an UPDATE.
func (b StatementBuilderType) Update(table string) UpdateBuilder { return UpdateBuilder{} }

// Update begins an UPDATE.
func Update(table string) UpdateBuilder { return UpdateBuilder{} }

// UpdateBuilder builds an UPDATE.
type UpdateBuilder struct{ runner BaseRunner }

func (b UpdateBuilder) PlaceholderFormat(f PlaceholderFormat) UpdateBuilder { return b }
func (b UpdateBuilder) RunWith(runner BaseRunner) UpdateBuilder             { return b }
func (b UpdateBuilder) Set(column string, value interface{}) UpdateBuilder  { return b }
func (b UpdateBuilder) SetMap(clauses map[string]interface{}) UpdateBuilder { return b }
func (b UpdateBuilder) Where(pred interface{}, args ...interface{}) UpdateBuilder {
	return b
}
func (b UpdateBuilder) Suffix(sql string, args ...interface{}) UpdateBuilder { return b }
func (b UpdateBuilder) ToSql() (string, []interface{}, error)                { return "", nil, nil }
func (b UpdateBuilder) Exec() (sql.Result, error)                            { return nil, nil }
func (b UpdateBuilder) ExecContext(ctx context.Context) (sql.Result, error)  { return nil, nil }

// Delete begins a DELETE.
func (b StatementBuilderType) Delete(from string) DeleteBuilder { return DeleteBuilder{} }

// Delete begins a DELETE.
func Delete(from string) DeleteBuilder { return DeleteBuilder{} }

// DeleteBuilder builds a DELETE.
type DeleteBuilder struct{ runner BaseRunner }

func (b DeleteBuilder) PlaceholderFormat(f PlaceholderFormat) DeleteBuilder { return b }
func (b DeleteBuilder) RunWith(runner BaseRunner) DeleteBuilder             { return b }
func (b DeleteBuilder) Where(pred interface{}, args ...interface{}) DeleteBuilder {
	return b
}
func (b DeleteBuilder) ToSql() (string, []interface{}, error)               { return "", nil, nil }
func (b DeleteBuilder) Exec() (sql.Result, error)                           { return nil, nil }
func (b DeleteBuilder) ExecContext(ctx context.Context) (sql.Result, error) { return nil, nil }

// RowScanner scans one row.
type RowScanner interface {
	Scan(...interface{}) error
}

// Select begins a SELECT.
func (b StatementBuilderType) Select(columns ...string) SelectBuilder { return SelectBuilder{} }

// Select begins a SELECT.
func Select(columns ...string) SelectBuilder { return SelectBuilder{} }

// SelectBuilder builds a SELECT.
type SelectBuilder struct{}

func (b SelectBuilder) PlaceholderFormat(f PlaceholderFormat) SelectBuilder { return b }
func (b SelectBuilder) RunWith(runner BaseRunner) SelectBuilder             { return b }
func (b SelectBuilder) From(from string) SelectBuilder                      { return b }
func (b SelectBuilder) Where(pred interface{}, args ...interface{}) SelectBuilder {
	return b
}
func (b SelectBuilder) Limit(limit uint64) SelectBuilder                     { return b }
func (b SelectBuilder) Suffix(sql string, args ...interface{}) SelectBuilder { return b }
func (b SelectBuilder) ToSql() (string, []interface{}, error)                { return "", nil, nil }
func (b SelectBuilder) QueryRow() RowScanner                                 { return nil }
func (b SelectBuilder) QueryRowContext(ctx context.Context) RowScanner       { return nil }
func (b SelectBuilder) Query() (*sql.Rows, error)                            { return nil, nil }
func (b SelectBuilder) QueryContext(ctx context.Context) (*sql.Rows, error)  { return nil, nil }

// Insert begins an INSERT.
func (b StatementBuilderType) Insert(into string) InsertBuilder { return InsertBuilder{} }

// Insert begins an INSERT.
func Insert(into string) InsertBuilder { return InsertBuilder{} }

// InsertBuilder builds an INSERT.
type InsertBuilder struct{}

func (b InsertBuilder) PlaceholderFormat(f PlaceholderFormat) InsertBuilder { return b }
func (b InsertBuilder) RunWith(runner BaseRunner) InsertBuilder             { return b }
func (b InsertBuilder) Columns(columns ...string) InsertBuilder             { return b }
func (b InsertBuilder) Values(values ...interface{}) InsertBuilder          { return b }
func (b InsertBuilder) SetMap(clauses map[string]interface{}) InsertBuilder { return b }
func (b InsertBuilder) Suffix(sql string, args ...interface{}) InsertBuilder {
	return b
}
func (b InsertBuilder) ToSql() (string, []interface{}, error)               { return "", nil, nil }
func (b InsertBuilder) Exec() (sql.Result, error)                           { return nil, nil }
func (b InsertBuilder) ExecContext(ctx context.Context) (sql.Result, error) { return nil, nil }
func (b InsertBuilder) QueryRowContext(ctx context.Context) RowScanner      { return nil }
