package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// README: "The response is stored as the codec encodes it (JSON by
// default), and a duplicate gets it decoded into a new value of the
// response type: what JSON leaves out is not replayed." The duplicate must
// get json.Unmarshal(json.Marshal(first)) into a new value.
func r57Check[Resp any](t *testing.T, name string, first Resp) {
	t.Helper()
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	call := runtime.Call[int, Resp]{Operation: "R57." + name, Key: "k-" + name, Request: 1,
		Effect: func(context.Context, int) (Resp, error) { return first, nil }}
	got1, err := runtime.Do(context.Background(), rt, call)
	if err != nil {
		t.Errorf("%s: first: %v", name, err)
		return
	}
	_ = got1
	got2, err := runtime.Do(context.Background(), rt, call)
	if err != nil {
		t.Errorf("%s: replay: %v", name, err)
		return
	}
	b, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	var want Resp
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("%s: json: %v", name, err)
	}
	if !reflect.DeepEqual(got2, want) {
		t.Errorf("%s: replay %#v, json round trip %#v (stored %s)", name, got2, want, b)
	}
}

type r57Str struct {
	N int64   `json:",string"`
	U uint8   `json:"u,string"`
	S string  `json:"s,string"`
	B bool    `json:",string"`
	F float64 `json:",string"`
}
type R57Inner struct{ X, Y int }
type r57Emb struct {
	*R57Inner
	Z int
}
type r57Bytes struct {
	Nil   []byte
	Empty []byte
	Arr   [3]byte
	M     map[string][]byte
}
type r57Case struct {
	A int `json:"a"`
	B int `json:"A"`
}
type r57Omit struct {
	P  *int            `json:",omitempty"`
	S  []int           `json:",omitempty"`
	M  map[string]int  `json:",omitzero"`
	ST struct{ Q int } `json:",omitzero"`
}
type r57Any struct {
	V any
	L []any
}
type r57Named string
type r57NamedMap map[r57Named][]r57Named
type r57PP struct{ P **int }

func TestR57ReplayEqualsJSON(t *testing.T) {
	one := 1
	p := &one
	r57Check(t, "str", r57Str{N: 42, U: 7, S: "hi", B: true, F: 1.5})
	r57Check(t, "embnil", r57Emb{Z: 3})
	r57Check(t, "emb", r57Emb{R57Inner: &R57Inner{1, 2}, Z: 3})
	r57Check(t, "bytes", r57Bytes{Empty: []byte{}, Arr: [3]byte{1, 2, 3}, M: map[string][]byte{"a": nil, "b": {}}})
	r57Check(t, "case", r57Case{A: 1, B: 2})
	r57Check(t, "omit", r57Omit{S: []int{}, M: map[string]int{}})
	r57Check(t, "any", r57Any{V: map[string]any{"a": 1.0}, L: []any{"x", 2.0, nil}})
	r57Check(t, "named", r57NamedMap{"a": {"b"}, "c": nil})
	r57Check(t, "pp", r57PP{P: &p})
	r57Check(t, "ppnil", r57PP{P: new(*int)})
	r57Check(t, "html", map[string]string{"<a>": "&\u2028\xff"})
	r57Check(t, "floats", []float64{1e21, 1e-7, 0.1, 5e-324, 1.7976931348623157e308})
	r57Check(t, "neg0", []float32{float32(math.Copysign(0, -1)), 1.0000001, 3.4e38})
	r57Check(t, "uints", []uint64{18446744073709551615, 0})
	r57Check(t, "sliceany", []any{1.0, "a", []any{}, map[string]any{}})
	r57Check(t, "mapany", map[string]any{"x": nil})
	r57Check(t, "ptrslice", &[]int{})
	r57Check(t, "nilptr", (*int)(nil))
	r57Check(t, "rawmsg", json.RawMessage(`{"a": 1}`))
	r57Check(t, "nums", map[string]json.Number{"a": "1.50"})
	r57Check(t, "intkeys", map[int]string{2: "b", 10: "a", -1: "c"})
	_ = fmt.Sprint
}
