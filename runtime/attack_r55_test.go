package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type r55Receipt struct{ ID string }

func (r r55Receipt) String() string { return "receipt " + r.ID }

// Review r55, finding. README.md line 17: "Duplicates replay the stored
// response"; README.md line 458, under the table of every error Do
// returns: "All are sentinel errors for errors.Is, wrapped with the
// operation and key"; runtime.ErrNotReplayable: "the call with this
// identity succeeded, but its response was not stored (... or not
// encodable), so it cannot be replayed. The effect is not run again".
// Schedule: the response type is an interface (fmt.Stringer) holding a
// struct (idemgen accepts such an op too); the first call gets its
// response; a duplicate then replays. Its JSON encodes, so SUCCESS is
// stored with it; decoding it into the interface fails, and the duplicate
// gets "decoding stored response: json: cannot unmarshal ..." that matches
// no sentinel: a caller's switch (400/422/409/503) falls to its default
// (a 500, a "payment failed") for a call that succeeded. Want the response,
// or ErrNotReplayable (stable, "never a re-run").
func TestR55InterfaceResponseReplay(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	call := runtime.Call[string, fmt.Stringer]{Operation: "R55.Iface", Key: "k1", Request: "r",
		Effect: func(context.Context, string) (fmt.Stringer, error) { runs.Add(1); return r55Receipt{ID: "ch_1"}, nil }}
	ctx := context.Background()
	first, err1 := runtime.Do(ctx, rt, call)
	second, err2 := runtime.Do(ctx, rt, call)
	t.Logf("first: %#v, %v; duplicate: %#v, %v; runs %d", first, err1, second, err2, runs.Load())
	if runs.Load() != 1 {
		t.Fatalf("the effect ran %d times", runs.Load())
	}
	if err1 != nil {
		t.Fatalf("first call: %v", err1)
	}
	if err2 == nil && fmt.Sprint(second) != fmt.Sprint(first) {
		t.Errorf("the duplicate got %v, the first caller %v", second, first)
	}
	if err2 != nil && !errors.Is(err2, runtime.ErrNotReplayable) {
		t.Errorf("the duplicate got %v; want the response or ErrNotReplayable", err2)
	}
}

type r55Money struct{ amount int64 }

// Review r55, observation: a response whose fields JSON does not see
// (unexported) is replayed as its zero value: the first caller got 4200, a
// duplicate 0, with no error. JSON's own rule, which the README now states
// ("Unexported fields and fields tagged json:"-" come back as zero
// values"): pinned here.
func TestR55UnexportedResponseReplayedZero(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	call := runtime.Call[string, r55Money]{Operation: "R55.Money", Key: "k1", Request: "r",
		Effect: func(context.Context, string) (r55Money, error) { return r55Money{amount: 4200}, nil }}
	ctx := context.Background()
	first, err1 := runtime.Do(ctx, rt, call)
	second, err2 := runtime.Do(ctx, rt, call)
	t.Logf("first: %+v, %v; duplicate: %+v, %v", first, err1, second, err2)
	if err1 != nil || first != (r55Money{amount: 4200}) {
		t.Fatalf("first call: %+v, %v", first, err1)
	}
	if err2 != nil || second != (r55Money{}) {
		t.Errorf("duplicate: %+v, %v; want the zero value, as the README says of unexported fields", second, err2)
	}
}
