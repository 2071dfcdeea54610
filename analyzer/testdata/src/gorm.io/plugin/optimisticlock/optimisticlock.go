// Package optimisticlock is a minimal stub of gorm.io/plugin/optimisticlock.
package optimisticlock

// Version makes gorm add "AND version = <old>" to updates of the model.
type Version struct {
	Int64 int64
	Valid bool
}
