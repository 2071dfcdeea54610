package pgstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/benchcmp"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// BenchmarkPerf runs runtime.Do beside the floor, the least SQL any
// correct design needs, on the same table, at 1, 8 and 32 callers: a first
// call persists PROCESSING before the effect and the outcome after it (an
// autocommitted INSERT, then an autocommitted UPDATE); a replay is one
// SELECT by key of what a replay needs (state, fingerprint, response).
// first-group-commit is the first call with pgstore.WithGroupCommit.
//
// The throughput rows (first, first-group-commit, replay-*) run each side
// alone, alternated over rounds (benchcmp.Alternating): when the server
// saturates, sides that run at once wait in the same queue and their
// latency ratio measures the queue, not each design. The shared-* rows run
// both sides at once (benchcmp.Interleaved): latency under shared load,
// not throughput. bench/stores.sh reports the a/floor ratios.
func BenchmarkPerf(b *testing.B) {
	p := testPool(b)
	ctx := context.Background()
	rt, err := runtime.New(pgstore.New(p))
	if err != nil {
		b.Fatal(err)
	}
	grouped, err := runtime.New(pgstore.New(p, pgstore.WithGroupCommit(0)))
	if err != nil {
		b.Fatal(err)
	}
	run := time.Now().UnixNano()
	const spread = 2000
	req := []byte(`{"account":"acct","cents":100}`)
	resp := []byte(`{"charge_id":"ch_1","cents":100}`)
	fp := runtime.Fingerprint(req)

	idemCtx := runtime.WithScope(ctx, fmt.Sprintf("perf/%d/idem", run))
	floorScope := fmt.Sprintf("perf/%d/floor", run)
	doOn := func(rt *runtime.Runtime, key string) error {
		_, err := runtime.Do(idemCtx, rt, runtime.Call[benchReq, benchResp]{Operation: "Payments.Charge", Key: key,
			Request: benchReq{"acct", 100}, Effect: benchEffect})
		return err
	}
	do := func(key string) error { return doOn(rt, key) }
	floorFirst := func(key string) error {
		if _, err := p.Exec(ctx, `INSERT INTO idem_records (scope, operation, key, fingerprint, state, owner, version, lease_expires_at, request)
			VALUES ($1, 'Payments.Charge', $2, $3, 'PROCESSING', 'floor', 1, now() + interval '30 seconds', $4)`, floorScope, key, fp, req); err != nil {
			return err
		}
		//idemlint:ignore blindupdate the floor times the bare statements; one writer per key, no CAS by design
		_, err := p.Exec(ctx, `UPDATE idem_records SET state = 'SUCCESS', version = 2, lease_expires_at = NULL,
			expires_at = now() + interval '1 day', response = $3
			WHERE scope = $1 AND operation = 'Payments.Charge' AND key = $2`, floorScope, key, resp)
		return err
	}
	floorGet := func(key string) error {
		var state string
		var fp, body []byte
		return p.QueryRow(ctx, `SELECT state, fingerprint, response FROM idem_records WHERE scope = $1 AND operation = 'Payments.Charge' AND key = $2`,
			floorScope, key).Scan(&state, &fp, &body)
	}
	// Finished records for the replays, on both sides.
	for i := range spread {
		k := "s" + strconv.Itoa(i)
		if err := do(k); err != nil {
			b.Fatal(err)
		}
		if err := floorFirst(k); err != nil {
			b.Fatal(err)
		}
	}
	for _, callers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("first/callers=%d", callers), func(b *testing.B) {
			prefix := fmt.Sprintf("f%d-%d-", callers, time.Now().UnixNano())
			benchcmp.Alternating(b, callers,
				func(i int64) error { return do(prefix + strconv.FormatInt(i, 10)) },
				func(i int64) error { return floorFirst(prefix + strconv.FormatInt(i, 10)) })
		})
		b.Run(fmt.Sprintf("first-group-commit/callers=%d", callers), func(b *testing.B) {
			prefix := fmt.Sprintf("g%d-%d-", callers, time.Now().UnixNano())
			benchcmp.Alternating(b, callers,
				func(i int64) error { return doOn(grouped, prefix+strconv.FormatInt(i, 10)) },
				func(i int64) error { return floorFirst(prefix + strconv.FormatInt(i, 10)) })
		})
		b.Run(fmt.Sprintf("replay-hot/callers=%d", callers), func(b *testing.B) {
			benchcmp.Alternating(b, callers,
				func(int64) error { return do("s0") },
				func(int64) error { return floorGet("s0") })
		})
		b.Run(fmt.Sprintf("replay-spread/callers=%d", callers), func(b *testing.B) {
			benchcmp.Alternating(b, callers,
				func(i int64) error { return do("s" + strconv.FormatInt(i%spread, 10)) },
				func(i int64) error { return floorGet("s" + strconv.FormatInt(i%spread, 10)) })
		})
		b.Run(fmt.Sprintf("shared-first/callers=%d", callers), func(b *testing.B) {
			prefix := fmt.Sprintf("i%d-%d-", callers, time.Now().UnixNano())
			benchcmp.Interleaved(b, callers,
				func(i int64) error { return do(prefix + strconv.FormatInt(i, 10)) },
				func(i int64) error { return floorFirst(prefix + strconv.FormatInt(i, 10)) })
		})
		b.Run(fmt.Sprintf("shared-replay-spread/callers=%d", callers), func(b *testing.B) {
			benchcmp.Interleaved(b, callers,
				func(i int64) error { return do("s" + strconv.FormatInt(i%spread, 10)) },
				func(i int64) error { return floorGet("s" + strconv.FormatInt(i%spread, 10)) })
		})
	}
}
