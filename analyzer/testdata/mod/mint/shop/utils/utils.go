// Package utils holds the order service's helpers.
package utils

import "gorm.io/gorm"

// PanicIfErrorWithRollback rolls back and panics when err is set; it does
// nothing otherwise.
func PanicIfErrorWithRollback(err error, tx *gorm.DB) {
	if err != nil {
		tx.Rollback()
		panic(err)
	}
}
