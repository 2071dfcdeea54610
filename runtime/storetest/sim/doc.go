// Package sim is a randomized, seeded, fault-injecting simulation of the idem
// protocol, for store authors and for the runtime's own tests. A store's
// tests call [Run] (or [Runs], which adds the soak loop and seed replay):
//
//	func TestSimulation(t *testing.T) {
//		sim.Runs(t, 1, func(t *testing.T, seed uint64) {
//			sim.Run(t, sim.Config{Name: "mystore", Store: newStore(t), Seed: seed})
//		})
//	}
//
// # What a run does
//
// Many workers, each a [runtime.Runtime] with its own owner id and error
// policy, share the store under test through a fault-injecting wrapper.
// Clients send requests on a few dozen keys of two operations, one with a
// Query and one without; each request is delivered one to four times
// (concurrent duplicates, retries within the lease, retries after the TTL),
// sometimes with another payload under the same key, which must get
// [runtime.ErrKeyReused]; some requests are takeover storms (a delivery dies
// or pauses past its lease, four more follow just after each lease ends).
// Workers use the three error policies in turn. A [runtime.Reconciler] and a [runtime.Sweeper] run
// throughout; leases and TTLs are short. The injected faults:
//
//   - store errors before a write (the wrapper returns a transient error
//     without calling the store);
//   - a store write applied but its reply lost (the wrapper calls the store,
//     discards the result and returns a transient timeout);
//   - slow store calls;
//   - a worker paused past its lease: its effect sleeps, before or after
//     the downstream call, and its lease renewals fail meanwhile (they fail
//     rather than block: the runtime renews holding a lock, and a goroutine
//     waiting on a mutex would stop virtual time in a synctest bubble);
//   - a worker that dies mid-effect: its effect never returns during the
//     run and its renewals fail;
//   - the effect's reply lost after the downstream applied it (a timeout in
//     one of several shapes: context deadline, net.Error, *url.Error around a
//     wrapped timeout), effects failing retryably, permanently, by timeout or
//     with an unclassified error before anything happened;
//   - the caller's context cancelled during the claim, during the effect
//     (after the downstream applied it) and during the completion;
//   - queries that are slow (longer than the lease; deciding at the start or
//     at the end of the delay), that answer Unknown at random, and a
//     downstream whose new effects stay invisible to the query (Unknown, never
//     "not happened") for a while;
//   - responses larger than the store's record limit;
//   - the store's clock jumping forward (stores built on a [Clock], such as
//     memstore with memstore.WithClock); PostgreSQL and Redis clocks cannot be
//     moved, so there the run stalls every store call instead, longer than the
//     lease, which expires leases the same way while nobody can act;
//   - TTLs expiring while clients still retry (records swept or replaced).
//
// A fenced fake downstream records every effect: it deduplicates nothing, so
// that a double effect is visible, and it fences by the attempt's fencing
// token per downstream key (a request, effect or query, with token t makes
// later requests with tokens below t stale, and they are rejected). Its
// query answers from what it recorded.
//
// The wrapper embeds [runtime.Store], so methods added to the interface
// later pass through; a new method that changes records must also be
// recorded (faults.go) and modelled (history.go), or the linearizability
// check will see states it cannot explain.
//
// # Invariants
//
// Checked on every run; each failure names the seed, the invariant, the
// identity and the events that led to it:
//
//   - at-most-once: per identity and record life (a life ends when a
//     finished record's TTL passes), the downstream applied the effect at
//     most once when the operation has a Query, and no effect was even
//     started after the downstream had applied one (the runtime must ask
//     the query, and re-check its lease, first); and an attempt starting an
//     effect still holds its lease (no other owner wrote the record since
//     the attempt's own claim or compare-and-set);
//   - at-least-once window (operations without a Query): the runtime cannot
//     know whether an earlier owner acted, so after a takeover it runs the
//     effect again. The run measures, per identity and life, the extra
//     effects the downstream applied, and accepts one only when the attempt
//     that applied the earlier effect did not record its outcome in time
//     because of an injected fault (it was paused, died, lost a store reply,
//     hit a store error, or was cancelled, or a clock jump or stall
//     overlapped it). Any other duplicate is a violation. [Report.Window]
//     counts the accepted ones;
//   - every client-visible success carries a response the downstream
//     produced for that identity and payload, and the stored SUCCESS
//     response is one as well; no client is told FAILED
//     ([runtime.ErrPermanent]) for a record life in which the effect
//     happened, and no FAILED record is left for one;
//   - a call that recorded SUCCESS itself returns that response, and a call
//     with no fault injected whose effect succeeded returns its response
//     (ErrLeaseLost aside, which a stall of the machine can also cause);
//   - key reuse: a call whose claim found another fingerprint gets
//     ErrKeyReused, and no call gets it for its own fingerprint;
//   - at the end (faults stopped, leases expired, the reconciler run to
//     quiescence, every identity retried once by a healthy client, the
//     reconciler run again) no record is PROCESSING, and every UNKNOWN
//     record left is reported: there are at least as many
//     [runtime.EventReconcileGaveUp] events for its operation as UNKNOWN
//     records left;
//   - the store's history, recorded by the wrapper, is linearizable against
//     a model of the record, per identity (porcupine). The model assumes only
//     that versions strictly increase per identity and never repeat (across
//     releases, sweeps and replacements), decides lease and TTL branches with
//     the StoreNow the store returned, accepts both branches where it cannot
//     know the time (after a write that set a lease or a TTL), and lets a
//     finished record vanish once its TTL may have passed (sweeps and Redis
//     expiry). The wrapper shields the store from the caller's cancellation
//     (the store call always runs to completion and its reply is then lost),
//     so every recorded output is known; a store call that failed with an
//     unexpected error leaves its identity unchecked, and the report counts
//     those.
//
// # Reproducing a run
//
// Each run logs its seed. IDEM_SIM_SEED=<n> replays it with [Runs]: the seed
// fixes the arrivals, keys, payloads, delivery plans, every fault decision (a
// function of the call and the n-th store operation within it) and every
// injected delay. Goroutine interleaving is the operating system's, so a
// replay on PostgreSQL or Redis explores the same schedule but not always the
// same interleaving; on memstore inside testing/synctest (virtual time) runs
// are close to deterministic and long leases cost nothing.
// IDEM_SIM_DURATION=<d> makes [Runs] repeat with fresh seeds for that long
// (the soak mode of bench/soak.sh) and IDEM_SIM_SCALE=<n> multiplies the
// number of requests.
package sim
