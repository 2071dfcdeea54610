// Package doors drives the idem protocol through every entry point users
// reach it by, on any store, with the faults that broke those entry points,
// and checks per identity what a client was told against what the
// downstream applied and what the record finally says. It complements
// package sim (which drives runtime.Do alone, with store faults and a
// linearizability check): a store's tests call [Run] once per door:
//
//	func TestSimDoors(t *testing.T) {
//		for _, door := range doors.Doors(false) {
//			t.Run(door, func(t *testing.T) {
//				sim.Runs(t, 1, func(t *testing.T, seed uint64) {
//					doors.Run(t, door, doors.Config{Name: "mystore", Store: newStore(t), Seed: seed})
//				})
//			})
//		}
//	}
//
// # Doors
//
//   - [DoorDo]: runtime.Do, one operation with a query and one without;
//   - [DoorGenerated]: the idemgen wrapper of internal/simpay (committed,
//     regenerated with `go run ./cmd/idemgen` there): Charge with a
//     reconcile query, Refund without;
//   - [DoorHTTP]: idemhttp behind a real http.Server on loopback: Go 1.22
//     patterns, two sub-muxes with the same inner pattern "POST /{id}"
//     mounted with http.StripPrefix under /payments/ and /refunds/, the
//     middleware around each handler, the same keys and bodies sent to both;
//     /payments/ has an idemhttp.Query (the downstream's answer as the
//     handler's response: the receipt, or the decline's 402), /refunds/ none.
//     Each worker draws its layout from the seed: the route placements
//     alone, or inside a per-process placement on a memory store around the
//     top mux (docs/http.md's two placements), with or without
//     http.MaxBytesHandler between the two. Each delivery spells its URL
//     one of 16 ways: under /v1 (a rewrite in front of every placement
//     takes it off, setting RequestURI to what it leaves), with the key's
//     first character percent-encoded (upper- or lower-case hex), with the
//     Host upper-cased; all name one request;
//   - [DoorGRPC]: idemgrpc on a loopback grpc server (a hand-written
//     service on structpb), called through the client interceptor with
//     grpc's retry policy (UNAVAILABLE); some answers are lost in transport
//     after the handler ran, and grpc retries them with the same key;
//     Charge has an idemgrpc.Query (the receipt, or the decline's status),
//     Refund none;
//   - [DoorTx] (PostgreSQL): pgstore.DoTx in concurrent caller transactions
//     whose effect inserts a row; callers hold their transaction open, then
//     commit, roll back, or fail after DoTx and roll back. Some callers call
//     DoTx twice with the same identity in their transaction (15%), or call
//     it inside a savepoint they roll back and then call it again (20%, a
//     batch that retries an item); the second call's answer is the
//     client's. The committed rows are the downstream.
//
// Group commit is a store option: the PostgreSQL tests run the doors again
// on a store with pgstore.WithGroupCommit, with [Config.Background]
// poisoning batches (claims PostgreSQL refuses) so that batches fail.
//
// # Faults
//
// Each delivery's handler does one of: answer at once; take 0.6 lease
// (duplicates wait on it, some with caller deadlines of 0.2 to 0.4 lease,
// shorter than the runtime's MaxWait, so they expire while waiting); take
// 1.3 leases while the store's renewals of its lease are slow (lease/3, then
// answered), fail, or hang lease/3 and time out, every one in a row;
// decline permanently with a gateway's HTML page (3.5 KB of <, > and &,
// which JSON escapes to six bytes each) as the failure message, a gRPC
// status with an ErrorInfo carrying it, or an HTTP 402 body; apply the
// effect and then return a timeout or cancellation wrapped one of six ways
// (fmt.Errorf %w around context.DeadlineExceeded or context.Canceled, a
// *url.Error timeout, a gRPC DeadlineExceeded or Canceled status,
// errors.Join); time out before the downstream; (gRPC) answer and have the
// answer lost in transport. Some responses are larger than the record
// limit (1 KiB by default), so that every outcome kind is refused at full
// size. Some deliveries (8%, all doors but DoTx's, whose SUCCESS is
// written in the caller's transaction) find every SUCCESS write of their
// call failing, whether their effect ran or their query found the effect
// done: the runtime answers the response with ErrNotRecorded. Some
// deliveries (10%) find every FAILED write of their call failing; on
// DoTx's door (30%, where only a decline writes FAILED, committed on its
// own by the store) another session holds the record's row from the
// decline until DoTx returns, so the write waits past the completion
// timeout. Requests
// are delivered one to three times: concurrent duplicates, retries just
// after the first lease would end, later retries; some reuse a key with
// another payload.
//
// At the end, leases expire, the reconciler converges what it can, an
// operator resolves what is left by runtime.Resolve to what the downstream
// knows (SUCCESS with the door's stored form of the response, or FAILED
// with the HTML page), and every identity is retried once by a healthy
// client. A record that retry leaves PROCESSING or UNKNOWN (its lease lost
// in a stall) is converged the same way once more.
//
// # Invariants
//
// Per identity (operation as the client addressed it, and key):
//
//   - at-most-once: the downstream applied the effect at most once; with a
//     query, a final successful retry means exactly once;
//   - no client is told success (or "succeeded, response not stored") for
//     an effect the downstream did not apply, nor failure for one it did;
//   - a failure is an answer only once recorded: no client is told its
//     call failed while its FAILED write failed (or waited on the row)
//     and no FAILED of its identity had been applied;
//   - no client gets another identity's response, and two routes are never
//     stored under one operation;
//   - a delivery whose SUCCESS writes failed gets the response its call
//     produced (its handler's, or the one its query found), not "retry"
//     nor "the store is unavailable" (a lost lease, a gRPC answer lost in
//     transport on purpose and the caller's own deadline aside);
//   - no client is told the store is unavailable while no store fault was
//     injected on its identity; every answer is one the door's protocol
//     defines; key reuse is reported only for another payload;
//   - every outcome is recorded whatever its size (Resolve included), the
//     final record agrees with the downstream (SUCCESS only if applied,
//     FAILED only if not), and no record is left PROCESSING or UNKNOWN;
//   - a healthy retry settles the record: the final retry ends it SUCCESS
//     or FAILED;
//   - (DoTx) a transaction's second call replays its first's response, and
//     a caller never waits for its own transaction: a savepoint retry told
//     ErrInProgress had another delivery of its identity in flight.
//
// An operation without a query has the at-least-once window ErrNotRecorded
// documents: after a failed SUCCESS write the claim stays PROCESSING, and
// the duplicate that takes it over runs the effect again, whose answer
// (a decline, recorded FAILED) then stands. On such an identity a second
// effect, a failure answer and a FAILED record are excused, one effect per
// failed write; with a query, never.
//
// A run on a loaded machine may see the process stall (no goroutine runs
// for a while). Four breaches of the invariants above are what the runtime
// documents for such a stall, and only those are excused, with the stall
// measured (see [Run]): a second effect after a lease was lost, in a stall
// past the lease rule's margin (on every door but DoTx's); in a stall past
// a third of the lease, a store-failure answer or ERROR log caused only by
// a write of the runtime's own running out of its time (the late-start
// confirmation's renewal, a failure's FAILED or UNKNOWN write); on an
// operation without a query, the at-least-once window of a SUCCESS write
// that ran out of its time, as for one failed by injection; and, in a
// stall past the lease rule's margin, a final retry that leaves its record
// UNKNOWN or PROCESSING (its lease lost to the machine): the record must
// still converge.
//
// # Tenants
//
// Each request is sent in one of three tenants' scopes (a short one, a
// long one and a third; the long one is over 255 bytes behind the HTTP and
// gRPC adapters, whose identities then keep a fixed-size name of it, and
// cut to 255 bytes where runtime.Do takes the scope as it is). One key
// under two tenants is two identities. The downstream is multi-tenant: its
// query looks a charge up in the ledger of the tenant its context's scope
// names, so a query that lost its scope, or got another's, answers "not
// happened" and the effect runs again, which at-most-once reports; a
// replay across tenants is a receipt of another identity.
//
// IDEM_SIM_SEED replays a run's schedule (see sim.Runs); goroutine
// interleaving and, outside synctest, timing are the machine's.
package doors
