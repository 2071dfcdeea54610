// Package runtime makes request handlers idempotent: it gives a call with a
// client-supplied idempotency key exactly-once effect under at-least-once
// delivery.
//
// A call is identified by (scope, operation, key). The first call for an
// identity atomically claims a PROCESSING record with a lease, runs the effect
// with no store transaction open, and then moves the record by compare-and-set
// to SUCCESS (the response is stored and replayed), FAILED (a permanent error
// is stored and replayed), UNKNOWN (a timeout, a panic or an unclassified
// error: the effect may or may not have happened) or releases it (a retryable
// error: the effect did not happen, so a retry runs it again).
//
//	(absent) --claim--> PROCESSING --ok---------------> SUCCESS
//	                       |  \----permanent error---> FAILED
//	                       |  \----timeout/panic-----> UNKNOWN --query--> SUCCESS | FAILED
//	                       |  \----retryable error---> (absent)
//	                       \--lease expired--> takeover by CAS (query first when there is one)
//
// Duplicates never run the effect again: a finished record is replayed, a
// record in flight is waited on for at most MaxWait and then reported as
// [ErrInProgress], and an UNKNOWN record is converged with the operation's
// query function ("did it happen?") or reported as [ErrOutcomeUnknown].
//
// Every transition after the claim is a compare-and-set on state, owner and
// version; a worker whose lease was taken over learns it as [ErrLeaseLost]
// and changes nothing. Leases and expiry are decided by the store's clock.
//
// The runtime talks to storage through the small [Store] interface;
// implementations live in runtime/memstore (in-process), runtime/pgstore
// (PostgreSQL) and runtime/redisstore (Redis), and all of them pass the
// conformance suite in runtime/storetest.
package runtime
