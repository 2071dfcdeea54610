//go:build goexperiment.jsonv2

package jsonfast

import (
	"reflect"
	"testing"
)

// TestOffUnderJSONv2: under GOEXPERIMENT=jsonv2 no type gets a plan, so
// every encoding is encoding/json's own (the plans write the classic
// encoder's bytes, which json/v2 does not). The other tests of this
// package compare the plans with the classic encoder and build without
// the experiment only.
func TestOffUnderJSONv2(t *testing.T) {
	for _, typ := range []reflect.Type{
		reflect.TypeFor[string](), reflect.TypeFor[int](), reflect.TypeFor[[]byte](),
		reflect.TypeFor[map[string][]string](), reflect.TypeFor[struct{ A string }](),
	} {
		if Build(typ) != nil {
			t.Errorf("Build(%v): a plan under GOEXPERIMENT=jsonv2", typ)
		}
		var c Cache
		if p := c.lookup(typ); p != nil {
			t.Errorf("For(%v): a plan under GOEXPERIMENT=jsonv2", typ)
		}
	}
}
