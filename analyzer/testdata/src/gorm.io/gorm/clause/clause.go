// Package clause is a minimal stub of gorm.io/gorm/clause.
package clause

type Expression interface{ Build() }

type Column struct{ Name string }

type OnConflict struct {
	Columns   []Column
	DoNothing bool
	UpdateAll bool
}

func (OnConflict) Build() {}

type Locking struct{ Strength string }

func (Locking) Build() {}

type Returning struct{}

func (Returning) Build() {}
