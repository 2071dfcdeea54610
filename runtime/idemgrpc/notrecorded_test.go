package idemgrpc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemgrpc"
)

// Promise (runtime.ErrNotRecorded): when the method's query finds the call
// done but its SUCCESS cannot be recorded, the caller gets the query's
// response, as a caller whose handler ran gets its own. Schedule: the
// handler charges, then times out (UNKNOWN); a duplicate's query finds the
// charge while the store fails SUCCESS writes; once the store is back (and
// the duplicate's lease has passed) another duplicate records it.
func TestQueryFoundDoneUnrecordedAnswersResponse(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			ledger := &sync.Map{}
			q := func(ctx context.Context, req proto.Message) (proto.Message, runtime.Outcome, error) {
				if charge, ok := ledger.Load(req.(*structpb.Struct).Fields["order"].GetStringValue()); ok {
					return charge.(*structpb.Struct), runtime.OutcomeSucceeded, nil
				}
				return nil, runtime.OutcomeNotHappened, nil
			}
			store := &teststores.SuccessDown{Store: st.New(t)}
			f := start(t, setup{store: store, ledger: ledger,
				rtOpts: []runtime.Option{runtime.WithLease(time.Second), runtime.WithMaxWait(5 * time.Second), runtime.WithCompletionTimeout(500 * time.Millisecond)},
				opts:   []idemgrpc.Option{idemgrpc.Query(method, q, runtime.QueryOptions{})}})
			ctx := context.Background()
			c := call{tenant: teststores.Unique(), keys: []string{"k"}, mode: "effect-then-timeout", order: "o1", cents: 5}
			if first := f.call(t, ctx, c); first.err == nil {
				t.Fatalf("first call: %v, want its timeout", first.resp)
			}
			store.Down.Store(true)
			dup := f.call(t, ctx, c)
			if store.Failed.Load() == 0 {
				t.Fatalf("no SUCCESS write failed (%v %v): the schedule was not reproduced", dup.resp, dup.err)
			}
			if dup.err != nil || dup.resp.Fields["charge"].GetStringValue() != "ch_1" {
				t.Errorf("duplicate whose query found the charge done, SUCCESS not recorded: %v %v; want charge ch_1", dup.resp, dup.err)
			}
			store.Down.Store(false)
			for i := range 2 {
				r := f.call(t, ctx, c)
				if r.err != nil || r.resp.Fields["charge"].GetStringValue() != "ch_1" {
					t.Errorf("duplicate %d after the store recovered: %v %v; want charge ch_1", i, r.resp, r.err)
				}
			}
			if n := f.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times; want 1", n)
			}
		})
	}
}
