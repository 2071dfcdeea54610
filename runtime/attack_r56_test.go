package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

type r56Receipt struct{ ID string }

// README.md ("The response is stored as the codec encodes it ..."): "A
// response type that cannot be decoded into (an interface type) makes every
// duplicate ErrNotReplayable". runtime.ErrNotReplayable's doc: "or was
// stored but cannot be decoded as the caller's response type (an interface
// type, a type changed since)". The response type `any` is an interface
// type: the first caller gets the handler's r56Receipt; a duplicate must
// get that value or ErrNotReplayable, not a map[string]any (a caller's
// resp.(r56Receipt) then fails on every duplicate: a silent wrong value).
func TestR56AnyResponseReplayedAsMap(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	call := runtime.Call[string, any]{Operation: "R56.Any", Key: "k1", Request: "r",
		Effect: func(context.Context, string) (any, error) { runs.Add(1); return r56Receipt{ID: "ch_1"}, nil }}
	ctx := context.Background()
	first, err := runtime.Do(ctx, rt, call)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := first.(r56Receipt); !ok {
		t.Fatalf("first call: %T", first)
	}
	dup, err := runtime.Do(ctx, rt, call)
	if runs.Load() != 1 {
		t.Fatalf("effect ran %d times", runs.Load())
	}
	if errors.Is(err, runtime.ErrNotReplayable) {
		return
	}
	if err != nil {
		t.Fatalf("duplicate: error matching no sentinel: %v", err)
	}
	if _, ok := dup.(r56Receipt); !ok {
		t.Fatalf("duplicate replayed %T %#v where the first caller got %T %#v, with no error (want the handler's value or ErrNotReplayable)", dup, dup, first, first)
	}
}

// rawCodec passes []byte through as it is (a service whose requests and
// responses are already encoded: protobuf bytes, a signed payload).
type r56RawCodec struct{}

func (r56RawCodec) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case []byte:
		return v, nil
	case *[]byte:
		return *v, nil
	}
	return nil, fmt.Errorf("rawCodec: %T", v)
}

func (r56RawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*p = data
	return nil
}

// README: "Duplicates replay the stored response"; runtime.Codec: a codec of
// the service's own. A response that encodes to zero bytes (an empty
// payload) on every store: the duplicate gets what the first caller got, as
// on the memory store, or at least the same answer on every store.
func TestR56EmptyEncodedResponseEveryStore(t *testing.T) {
	answers := map[string]string{}
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t), runtime.WithCodec(r56RawCodec{}))
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			call := runtime.Call[[]byte, []byte]{Operation: "R56.Empty", Key: "k-" + teststores.Unique(), Request: []byte("req"),
				Effect: func(context.Context, []byte) ([]byte, error) { runs.Add(1); return []byte{}, nil }}
			ctx := context.Background()
			first, err := runtime.Do(ctx, rt, call)
			if err != nil {
				t.Fatal(err)
			}
			dup, err := runtime.Do(ctx, rt, call)
			answers[st.Name] = fmt.Sprintf("first %q, duplicate %q (nil %v) err %v, runs %d", first, dup, dup == nil, err, runs.Load())
			t.Log(answers[st.Name])
			if err != nil || runs.Load() != 1 || len(dup) != 0 {
				t.Errorf("%s: duplicate %q, %v (effect ran %d times)", st.Name, dup, err, runs.Load())
			}
		})
	}
}
