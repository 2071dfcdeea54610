// Package model is an exhaustive, bounded model check of idem's protocol, in
// the spirit of a TLA+ specification checked by TLC, written in Go.
//
// The model has one identity (the protocol is per record; versions come from
// a store-wide counter, which the model keeps), an abstract clock in ticks,
// and these actors:
//
//   - the store: the record (absent, PROCESSING, SUCCESS, FAILED, UNKNOWN;
//     owner, version, lease and TTL as ticks left, attempts, takeovers,
//     token) and its operations (Claim, Get, Transition, Renew, Release,
//     AcquirePending, Sweep) as atomic steps with the guards the stores
//     implement; [Replay] checks memstore, pgstore and redisstore against it;
//   - a fenced downstream: effects and queries carry the fencing token (the
//     record version), and a token below the highest seen is rejected;
//   - workers, each one call of runtime.Do as a program-counter state
//     machine: claim, replay, wait, takeover with and without a query, the
//     inline query, the compare-and-set to a new version before the effect,
//     the effect, the completion retried with its token, lease renewals and
//     the lease rule (a worker that cannot confirm its lease stops its effect
//     a tick before the lease can expire);
//   - the reconciler (AcquirePending, then the query or the no-query policy,
//     then its write), the sweeper and an operator running runtime.Resolve;
//   - the environment: a tick of the clock, crashes at any step, replies of
//     applied writes lost, queries that cannot tell.
//
// [Check] explores every interleaving of these steps breadth-first with a
// visited set (states canonicalised by renumbering versions in order and by
// sorting the workers, which are symmetric), within bounds on crashes, lost
// replies, unanswered queries and record lives, checking the invariants in
// every state and on every step, then the bounded liveness property on the
// whole graph. docs/reliability.md ("Exhaustive model check") states the
// bounds and the figures.
package model
