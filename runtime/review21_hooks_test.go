package runtime_test

// Review r21: code of the caller's that the runtime calls between the
// steps of a call's protocol (an Observer, a response's MarshalJSON, a
// Codec) panicked, and the call stopped half done: its claim's renewals
// went on for ever, its record stayed PROCESSING, and in DoTx its effect's
// writes stayed in the caller's transaction (pgstore's review21_test.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// r21Resp's MarshalJSON panics when Panic is set (a nil map or pointer in
// a real type).
type r21Resp struct {
	N     int  `json:"n"`
	Panic bool `json:"-"`
}

func (r r21Resp) MarshalJSON() ([]byte, error) {
	if r.Panic {
		panic("r21Resp.MarshalJSON")
	}
	return []byte(fmt.Sprintf(`{"n":%d}`, r.N)), nil
}

// r21Codec is JSON, except that encoding an r21Resp panics.
type r21Codec struct{}

func (r21Codec) Marshal(v any) ([]byte, error) {
	if _, ok := v.(r21Resp); ok {
		panic("r21Codec.Marshal")
	}
	return json.Marshal(v)
}

func (r21Codec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

func TestR21HookPanicsLeaveNoCallHalfDone(t *testing.T) {
	panicky := runtime.ObserverFunc(func(context.Context, runtime.Event) { panic("observer") })
	for _, tc := range []struct {
		name string
		opts []runtime.Option
		resp r21Resp
		// stored: duplicates replay the response (else ErrNotReplayable).
		stored bool
	}{
		{"observer panics on every event", []runtime.Option{runtime.WithObserver(panicky)}, r21Resp{N: 7}, true},
		{"response MarshalJSON panics", nil, r21Resp{N: 7, Panic: true}, false},
		{"codec panics on the response", []runtime.Option{runtime.WithCodec(r21Codec{})}, r21Resp{N: 7}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.New()
			opts := append([]runtime.Option{runtime.WithLease(300 * time.Millisecond), runtime.WithMaxWait(100 * time.Millisecond)}, tc.opts...)
			rt, err := runtime.New(store, opts...)
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			call := runtime.Call[string, r21Resp]{Operation: "R21.Hook", Key: "k", Request: "req",
				Effect: func(ctx context.Context, _ string) (r21Resp, error) {
					runs++
					// Long enough for a renewal to be scheduled.
					time.Sleep(150 * time.Millisecond)
					return tc.resp, nil
				}}
			ctx := context.Background()
			resp, p, err := r21Do(ctx, rt, call)
			if p != nil {
				t.Fatalf("Do panicked: %v", p)
			}
			if err != nil || resp.N != 7 {
				t.Fatalf("Do = %+v, %v; want the effect's response", resp, err)
			}
			if n, _ := runtime.RenewalsScheduled(rt); n != 0 {
				t.Errorf("%d renewals still scheduled after Do returned", n)
			}
			rec, err := store.Get(ctx, runtime.Identity{Operation: "R21.Hook", Key: "k"})
			if err != nil || rec.State != runtime.StateSuccess {
				t.Fatalf("record after Do: %+v, %v; want SUCCESS", rec, err)
			}
			dup, p, err := r21Do(ctx, rt, call)
			switch {
			case p != nil:
				t.Errorf("duplicate panicked: %v", p)
			case tc.stored && (err != nil || dup.N != 7):
				t.Errorf("duplicate = %+v, %v; want the replayed response", dup, err)
			case !tc.stored && !errors.Is(err, runtime.ErrNotReplayable):
				t.Errorf("duplicate = %+v, %v; want ErrNotReplayable (the response could not be encoded)", dup, err)
			}
			if runs != 1 {
				t.Errorf("the effect ran %d times, want 1", runs)
			}
		})
	}
}

// r21Do runs runtime.Do and returns the value of a panic that escaped it.
func r21Do[Req, Resp any](ctx context.Context, rt *runtime.Runtime, c runtime.Call[Req, Resp]) (resp Resp, p any, err error) {
	defer func() { p = recover() }()
	resp, err = runtime.Do(ctx, rt, c)
	return resp, nil, err
}
