package pgstore

import (
	"context"
	"sync/atomic"
	"time"
)

// SetClaimOrder fixes the order of s's claims: > 0 reads first, < 0
// inserts first, 0 guesses (the default).
func SetClaimOrder(s *Store, order int) { s.order.Fix(order) }

// SetBeforeSuccess makes DoTx on s call f after the effect returned and
// before it writes SUCCESS in the caller's transaction.
func SetBeforeSuccess(s *Store, f func()) { s.beforeSuccess = f }

// SetBeforeTakeover makes Claim on s call f between the read that found a
// record to take over and the takeover's compare-and-set.
func SetBeforeTakeover(s *Store, f func()) { s.beforeTakeover = f }

// SetAfterReadMiss makes Claim on s call f between a read that found no
// record and the insert that follows it.
func SetAfterReadMiss(s *Store, f func()) { s.afterReadMiss = f }

// SetRenewHook makes Renew on s call f with the renewal's number (from 1)
// and the renewal itself: f decides whether, when and how it runs.
func SetRenewHook(s *Store, f func(ctx context.Context, n int, renew func() (time.Time, error)) (time.Time, error)) {
	var n atomic.Int32
	s.renewHook = func(ctx context.Context, renew func() (time.Time, error)) (time.Time, error) {
		return f(ctx, int(n.Add(1)), renew)
	}
}

// GroupBeside reports how many statements of s ran alone, on their
// caller's context, beside a batch in flight for stuckAfter or more.
func GroupBeside(s *Store) int64 { return s.group.beside.Load() }

// SchemaColumns are the columns Migrate checks the record table for.
var SchemaColumns = schemaColumns
