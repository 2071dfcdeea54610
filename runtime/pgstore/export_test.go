package pgstore

// SetClaimOrder fixes the order of s's claims: > 0 reads first, < 0
// inserts first, 0 guesses (the default).
func SetClaimOrder(s *Store, order int) { s.order.Fix(order) }

// SetBeforeSuccess makes DoTx on s call f after the effect returned and
// before it writes SUCCESS in the caller's transaction.
func SetBeforeSuccess(s *Store, f func()) { s.beforeSuccess = f }

// SetBeforeTakeover makes Claim on s call f between the read that found a
// record to take over and the takeover's compare-and-set.
func SetBeforeTakeover(s *Store, f func()) { s.beforeTakeover = f }
