// Package gorm is a minimal stub of gorm.io/gorm with the upstream shapes
// of the chain methods.
package gorm

import (
	"context"
	"errors"

	"gorm.io/gorm/clause"
)

var ErrRecordNotFound = errors.New("record not found")

type DB struct {
	Error        error
	RowsAffected int64
	Statement    *Statement
}

type Statement struct{}

type Model struct {
	ID uint `gorm:"primarykey"`
}

func (db *DB) WithContext(ctx context.Context) *DB       { return db }
func (db *DB) Model(value any) *DB                       { return db }
func (db *DB) Table(name string, args ...any) *DB        { return db }
func (db *DB) Where(query any, args ...any) *DB          { return db }
func (db *DB) Not(query any, args ...any) *DB            { return db }
func (db *DB) Or(query any, args ...any) *DB             { return db }
func (db *DB) Select(query any, args ...any) *DB         { return db }
func (db *DB) Omit(columns ...string) *DB                { return db }
func (db *DB) Clauses(conds ...clause.Expression) *DB    { return db }
func (db *DB) Update(column string, value any) *DB       { return db }
func (db *DB) Updates(values any) *DB                    { return db }
func (db *DB) UpdateColumn(column string, value any) *DB { return db }
func (db *DB) UpdateColumns(values any) *DB              { return db }
func (db *DB) First(dest any, conds ...any) *DB          { return db }
func (db *DB) Take(dest any, conds ...any) *DB           { return db }
func (db *DB) Last(dest any, conds ...any) *DB           { return db }
func (db *DB) Find(dest any, conds ...any) *DB           { return db }
func (db *DB) Count(count *int64) *DB                    { return db }
func (db *DB) Create(value any) *DB                      { return db }
func (db *DB) Save(value any) *DB                        { return db }
func (db *DB) FirstOrCreate(dest any, conds ...any) *DB  { return db }
func (db *DB) Exec(sql string, values ...any) *DB        { return db }
func (db *DB) Raw(sql string, values ...any) *DB         { return db }
func (db *DB) Scan(dest any) *DB                         { return db }
func (db *DB) Transaction(fc func(tx *DB) error) error   { return fc(db) }
func (db *DB) Begin() *DB                                { return db }
func (db *DB) Commit() *DB                               { return db }
func (db *DB) Rollback() *DB                             { return db }
