// Package txutil: helpers that end the transaction they are given only
// on some paths, told apart by an error they are given (used by package
// endpaths, so that what they do reaches it as facts).
package txutil

import (
	"encoding/json"
	"log"

	"gorm.io/gorm"

	"example.com/orm/txrpc/endpaths/abort"
)

// Logger panics or exits through methods that return nothing.
type Logger struct{ prefix string }

// Panic logs and panics.
func (l *Logger) Panic(args ...any) { log.Panic(append([]any{l.prefix}, args...)...) }

// Error logs.
func (l *Logger) Error(args ...any) { log.Print(append([]any{l.prefix}, args...)...) }

type problem struct {
	Code  int      `json:"code"`
	Error []string `json:"error"`
}

// PanicIfError panics when err is set and is not "record not found".
func PanicIfError(err error, logger *Logger) {
	if err != nil && err != gorm.ErrRecordNotFound {
		logger.Error(err)
		panic(err)
	}
}

// PanicIfErrorWithRollback rolls back and panics when err is set (and is
// not "record not found"), checking the rollback's own error through
// PanicIfError, which returns when it is nil: every path that rolls back
// panics, so the transaction is open when it returns.
func PanicIfErrorWithRollback(err error, requestID string, msgs []string, logger *Logger, db *gorm.DB) {
	if err != nil && err != gorm.ErrRecordNotFound {
		rollback := db.Rollback()
		if rollback.Error != nil {
			PanicIfError(rollback.Error, logger)
		}
		out, err2 := json.Marshal(problem{Code: 500, Error: msgs})
		PanicIfError(err2, logger)
		logger.Error(requestID, err)
		panic(string(out))
	}
}

// RollbackAndPanic rolls back and panics through its logger's Panic.
func RollbackAndPanic(err error, tx *gorm.DB, logger *Logger) {
	if err != nil {
		tx.Rollback()
		logger.Panic(err)
	}
}

// RollbackAndPanicf rolls back and panics through log.Panicf.
func RollbackAndPanicf(err error, tx *gorm.DB) {
	if err != nil {
		tx.Rollback()
		log.Panicf("write: %v", err)
	}
}

// fail never returns.
func fail(err error) { panic(err) }

// RollbackAndFail rolls back and calls a function that never returns.
func RollbackAndFail(err error, tx *gorm.DB) {
	if err != nil {
		tx.Rollback()
		fail(err)
	}
}

// RollbackAndAbort rolls back and calls a function of another package
// that never returns.
func RollbackAndAbort(err error, tx *gorm.DB) {
	if err != nil {
		tx.Rollback()
		abort.With(500, err)
	}
}

// RollbackIfErr rolls back when err is set and returns: the transaction
// is ended exactly when the error it is given is not nil.
func RollbackIfErr(tx *gorm.DB, err error) {
	if err != nil {
		tx.Rollback()
	}
}

// CommitIfOK commits when err is nil and leaves the transaction to the
// caller otherwise.
func CommitIfOK(tx *gorm.DB, err error) {
	if err == nil {
		tx.Commit()
	}
}
