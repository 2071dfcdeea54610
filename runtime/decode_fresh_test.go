package runtime

import (
	"testing"
)

// TestDecodeResponseFromAFreshValue: a replay's response is decoded into a
// fresh value, whatever the value handed in holds: a field the record
// lacks is zero, not what the value held (the caller may hand in one it
// used before), on the fast path and on encoding/json's.
func TestDecodeResponseFromAFreshValue(t *testing.T) {
	type resp struct {
		A, B int
		M    map[string]int
		S    []string
	}
	rt, err := New(nopStore{})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{
		`{"A":3}`,                                // not every field: encoding/json
		`{"A":3,"B":0,"M":{"x":1},"S":["only"]}`, // canonical: the fast path
		`{"A":3,"B":0,"M":null,"S":null}`,
		`{ "A" : 3 }`,             // not canonical: encoding/json
		`{"A":3,"M":{"x":1}}`,     // a map the old value's must not be merged into
		`{"A":3,"S":["only"]}`,    // a slice
		`{"A":3,"Unknown":"yes"}`, // a field the type lacks
	} {
		dirty := resp{A: 1, B: 2, M: map[string]int{"old": 1}, S: []string{"old", "older"}}
		if err := decodeResponse(rt, []byte(data), &dirty); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if dirty.A != 3 || dirty.B != 0 || dirty.M["old"] != 0 || len(dirty.S) > 1 {
			t.Errorf("%s: decoded %+v, want A 3 and nothing of the old value", data, dirty)
		}
	}
}
