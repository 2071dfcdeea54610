package pgstore_test

// Adversarial review 19 of the default codec's fast path across entry
// points: DoTx encodes with rt.Codec().Marshal (encoding/json on the
// value), runtime.Do with jsonfast or encoding/json through a pointer. A
// record either one stores must answer the other's retry of the same
// request with its replay, never ErrKeyReused, and the replayed value must
// be json.Unmarshal's of the stored response.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/pgstore"
)

// r19PtrJSON has MarshalJSON on its pointer only: json.Marshal of a value
// holding it by value writes its fields; through a pointer, "ptr".
type r19PtrJSON struct{ N int }

func (*r19PtrJSON) MarshalJSON() ([]byte, error) { return []byte(`"ptr"`), nil }

type r19Plain struct {
	S  string   `json:"s"`
	P  **int8   `json:"p,omitempty"`
	L  []string `json:"l"`
	U  uint64
	In struct {
		B bool `json:"b,omitempty"`
	}
}

type r19Methods struct {
	A r19PtrJSON
	B [2]r19PtrJSON
	M map[string]r19PtrJSON
}

func TestReview19DoTxAndDoShareRecords(t *testing.T) {
	i8 := int8(-128)
	pi8 := &i8
	plain := r19Plain{S: "<&>\u2028\u2029\x00\x1f\xff\xfe\"\\/é😀\ufffd", P: &pi8, L: []string{}, U: 1<<64 - 1}
	methods := r19Methods{A: r19PtrJSON{1}, B: [2]r19PtrJSON{{2}, {3}}, M: map[string]r19PtrJSON{"k": {4}}}
	t.Run("plain", func(t *testing.T) { r19CrossEntry(t, plain) })
	t.Run("methods", func(t *testing.T) { r19CrossEntry(t, methods) })
	t.Run("pointer", func(t *testing.T) { r19CrossEntry(t, &plain) })
}

func r19CrossEntry[T any](t *testing.T, v T) {
	ctx := context.Background()
	p := testPool(t)
	s := pgstore.New(p)
	rt, err := runtime.New(s, runtime.WithOwner("r19"))
	if err != nil {
		t.Fatal(err)
	}
	scope := fmt.Sprintf("r19-cross/%d", time.Now().UnixNano())
	sctx := runtime.WithScope(ctx, scope)
	want, _ := json.Marshal(v)
	var wantVal T
	if err := json.Unmarshal(want, &wantVal); err != nil {
		wantVal = v // a type json cannot read back (MarshalJSON without UnmarshalJSON): compare encodings only
	}
	check := func(how string, got T, err error, wantVal T) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", how, err)
			return
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(wantVal)
		if string(gb) != string(wb) && !reflect.DeepEqual(got, wantVal) {
			t.Errorf("%s: replayed %s, want %s", how, gb, wb)
		}
	}
	dotx := func(key string, ran *int) (T, error) {
		var out T
		err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			var err error
			out, err = pgstore.DoTx(sctx, rt, tx, pgstore.TxCall[T, T]{Operation: "R19.X", Key: key, Request: v,
				Effect: func(context.Context, pgx.Tx, T) (T, error) { *ran++; return v, nil }})
			return err
		})
		return out, err
	}
	do := func(key string, ran *int) (T, error) {
		return runtime.Do(sctx, rt, runtime.Call[T, T]{Operation: "R19.X", Key: key, Request: v,
			Effect: func(context.Context, T) (T, error) { *ran++; return v, nil }})
	}
	for _, order := range [][2]string{{"dotx", "do"}, {"do", "dotx"}} {
		key := order[0] + "-then-" + order[1]
		ran := 0
		for j, how := range order {
			var got T
			var err error
			if how == "dotx" {
				got, err = dotx(key, &ran)
			} else {
				got, err = do(key, &ran)
			}
			if j == 0 {
				check(key+": "+how+" (the call)", got, err, v)
			} else {
				check(key+": "+how+" (its retry)", got, err, wantVal)
			}
		}
		if ran != 1 {
			t.Errorf("%s: the effect ran %d times", key, ran)
		}
		rec, err := s.Get(ctx, runtime.Identity{Scope: scope, Operation: "R19.X", Key: key})
		if err != nil || string(rec.Request) != string(want) {
			t.Errorf("%s: stored request %s, json.Marshal %s (%v)", key, rec.Request, want, err)
		}
	}
}
