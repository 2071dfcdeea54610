//lint:file-ignore SA5008 the test exercises the tags json treats unusually

package runtime_test

// Adversarial review 19 of the default codec's fast path (jsonfast) through
// the runtime: for seeded random values of types at the edges of its plans,
// the fingerprint runtime.Do stores is the SHA-256 of json.Marshal(request)
// (as earlier releases, and DoTx, compute it), the stored request and
// response are json.Marshal's bytes, and a replay of stored bytes that are
// canonical or almost canonical decodes as json.Unmarshal does.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/internal/jsonfast"
	"github.com/idemkit/idem/runtime/memstore"
)

type (
	r19Name  string
	r19Names []r19Name
	r19Leaf  struct {
		S  string  `json:"s,omitempty"`
		U8 uint8   `json:"u8,omitempty"`
		I  int     `json:",omitempty"`
		P  *string `json:"p,omitempty"`
	}
	r19Edge struct {
		Lower    int64 `json:"x"`
		Upper    int64 `json:"X"` // json folds case when decoding: exact names first
		PP       **int16
		PPP      ***bool  `json:"ppp,omitempty"`
		Names    r19Names `json:"names,omitempty"`
		Leaves   []r19Leaf
		LeafPtrs []*r19Leaf `json:"lp"`
		Nest     [][]*string
		HTML     string `json:"<&>,omitempty"`
		Dash     uint32 `json:"-,"`
		Skip     string `json:"-"`
		hidden   string
		U        uintptr
		Leaf     r19Leaf `json:"leaf,omitempty"`
		Gen      r19Gen[int8]
	}
	r19Gen[T any] struct {
		V  T   `json:"v"`
		VS []T `json:"vs,omitempty"`
	}
)

var _ = r19Edge{hidden: ""}

// r19Fill sets v from rng, edges more often than chance.
func r19Fill(rng *rand.Rand, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		alphabet := []string{"a", "é", "\u2028", "\u2029", "<", ">", "&", "\"", "\\", "/", "\x00", "\x1f", "\x7f", "\b", "\f",
			"\n", "\r", "\t", "\xff", "\xed\xa0\x80", "\xf0\x9f", "😀", "\ufffd", "\u00a0", "\ud7ff", " "}
		var b []byte
		for range rng.IntN(8) {
			b = append(b, alphabet[rng.IntN(len(alphabet))]...)
		}
		v.SetString(string(b))
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := 8 * v.Type().Size()
		switch rng.IntN(4) {
		case 0:
			v.SetInt(0)
		case 1:
			v.SetInt(-1 << (bits - 1))
		case 2:
			v.SetInt(1<<(bits-1) - 1)
		default:
			v.SetInt(int64(rng.Uint64()) >> (64 - bits))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		bits := 8 * v.Type().Size()
		switch rng.IntN(3) {
		case 0:
			v.SetUint(0)
		case 1:
			v.SetUint(math.MaxUint64 >> (64 - bits))
		default:
			v.SetUint(rng.Uint64() >> (64 - bits))
		}
	case reflect.Pointer:
		if depth > 5 || rng.IntN(3) == 0 {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		r19Fill(rng, v.Elem(), depth+1)
	case reflect.Slice:
		switch k := rng.IntN(4); {
		case depth > 5 || k == 0:
			return // nil
		case k == 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, rng.IntN(2))) // empty, not nil
		default:
			n := 1 + rng.IntN(3)
			v.Set(reflect.MakeSlice(v.Type(), n, n))
			for i := range n {
				r19Fill(rng, v.Index(i), depth+1)
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				r19Fill(rng, v.Field(i), depth+1)
			}
		}
	}
}

// r19Edits returns bytes near b that json accepts (or not): whitespace,
// upper-case escapes, \/ , keys in another case, a duplicate key, a field
// moved.
func r19Edits(rng *rand.Rand, b []byte) [][]byte {
	out := [][]byte{
		append([]byte(" "), b...),
		append(bytes.Clone(b), '\n'),
		bytes.ReplaceAll(b, []byte(`\u003c`), []byte(`\u003C`)),
		bytes.ReplaceAll(b, []byte(`\u00`), []byte(`\u00`)),
		bytes.ReplaceAll(b, []byte(`"x":`), []byte(`"X":`)),
		bytes.ReplaceAll(b, []byte(`"X":`), []byte(`"x":`)),
		bytes.ReplaceAll(b, []byte(`,"`), []byte(`, "`)),
		bytes.ReplaceAll(b, []byte(`é`), []byte(`\u00e9`)),
		bytes.ReplaceAll(b, []byte(`\ufffd`), []byte("\xff")),
		bytes.ReplaceAll(b, []byte(`null`), []byte(`[]`)),
		bytes.ReplaceAll(b, []byte(`[]`), []byte(`null`)),
		bytes.ReplaceAll(b, []byte(`:0`), []byte(`:-0`)),
		bytes.ReplaceAll(b, []byte(`:0`), []byte(`:0.0`)),
		bytes.ReplaceAll(b, []byte(`"PP":`), []byte(`"pp":`)),
		bytes.Replace(b, []byte(`{`), []byte(`{"x":7,`), 1),
		bytes.Replace(b, []byte(`{`), []byte(`{"Skip":"s","hidden":"h",`), 1),
	}
	if i := rng.IntN(len(b)); b[i] != '"' {
		out = append(out, append(append(bytes.Clone(b[:i]), ' '), b[i:]...))
	}
	return out
}

// r19Check runs the attack for one type with n seeded values.
func r19Check[T any](t *testing.T, seed uint64, n int) {
	ctx := runtime.WithScope(context.Background(), "r19")
	st := memstore.New()
	rt, err := runtime.New(st, runtime.WithOwner("r19"))
	if err != nil {
		t.Fatal(err)
	}
	if jsonfast.Build(reflect.TypeFor[T]()) == nil && jsonfast.Enabled {
		t.Fatalf("%v has no jsonfast plan: the attack would not reach the fast path", reflect.TypeFor[T]())
	}
	rng := rand.New(rand.NewPCG(seed, 19))
	var zero T
	op := fmt.Sprintf("R19.%T", zero)
	for i := range n {
		var req, resp T
		r19Fill(rng, reflect.ValueOf(&req).Elem(), 0)
		r19Fill(rng, reflect.ValueOf(&resp).Elem(), 0)
		key := fmt.Sprint("k", i)
		got, err := runtime.Do(ctx, rt, runtime.Call[T, T]{Operation: op, Key: key, Request: req,
			Effect: func(context.Context, T) (T, error) { return resp, nil }})
		if err != nil {
			t.Fatalf("%s: Do: %v", key, err)
		}
		rec, err := st.Get(ctx, runtime.Identity{Scope: "r19", Operation: op, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		wantReq, _ := json.Marshal(req)
		wantResp, _ := json.Marshal(resp)
		sum, err := rt.FingerprintOf(req) // json.Marshal's, whole (see Call.Fingerprint)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rec.Fingerprint, sum) || !bytes.Equal(rec.Request, wantReq) {
			t.Errorf("%s: stored request %s (fingerprint %x),\njson.Marshal   %s (sha256 %x)", key, rec.Request, rec.Fingerprint, wantReq, sum)
		}
		if !bytes.Equal(rec.Response, wantResp) {
			t.Errorf("%s: stored response %s,\njson.Marshal    %s", key, rec.Response, wantResp)
		}
		_ = got
		// The retry: same request, its own record.
		again, err := runtime.Do(ctx, rt, runtime.Call[T, T]{Operation: op, Key: key, Request: req,
			Effect: func(context.Context, T) (T, error) { t.Errorf("%s: the effect ran twice", key); return resp, nil }})
		var wantVal T
		if uerr := json.Unmarshal(wantResp, &wantVal); uerr != nil || err != nil || !reflect.DeepEqual(again, wantVal) {
			t.Errorf("%s: replay %+v, %v; json.Unmarshal %+v, %v", key, again, err, wantVal, uerr)
		}
		// Stored bytes almost canonical: what an older release, another
		// process or a hand edit may have left. The replay must be
		// json.Unmarshal's value, or its error.
		for j, edited := range r19Edits(rng, wantResp) {
			ekey := fmt.Sprintf("%s-e%d", key, j)
			id := runtime.Identity{Scope: "r19", Operation: op, Key: ekey}
			fp := []byte("fp")
			c, err := st.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp, Request: wantReq, Owner: "seed", Lease: time.Hour})
			if err != nil || !c.Claimed {
				t.Fatal(c, err)
			}
			if _, err := st.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, To: runtime.StateSuccess,
				Owner: "seed", Version: c.Record.Version, Response: edited, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			var want T
			uerr := json.Unmarshal(edited, &want)
			got, err := runtime.Do(ctx, rt, runtime.Call[T, T]{Operation: op, Key: ekey, Request: req, Fingerprint: fp,
				Effect: func(context.Context, T) (T, error) {
					t.Errorf("%s: the effect ran on a replay", ekey)
					return resp, nil
				}})
			switch {
			case (uerr == nil) != (err == nil):
				t.Errorf("%s: stored %s: replay error %v, json.Unmarshal's %v", ekey, edited, err, uerr)
			case uerr == nil && !reflect.DeepEqual(got, want):
				t.Errorf("%s: stored %s:\nreplay         %#v\njson.Unmarshal %#v", ekey, edited, got, want)
			}
		}
	}
}

// TestReview19CodecMatchesEncodingJSON: 300 seeded values per type.
func TestReview19CodecMatchesEncodingJSON(t *testing.T) {
	t.Run("edge", func(t *testing.T) { r19Check[r19Edge](t, 1, 300) })
	t.Run("ptr", func(t *testing.T) { r19Check[*r19Edge](t, 2, 300) })
	t.Run("slice", func(t *testing.T) { r19Check[[]**r19Leaf](t, 3, 300) })
	t.Run("names", func(t *testing.T) { r19Check[r19Names](t, 4, 300) })
	t.Run("gen", func(t *testing.T) { r19Check[r19Gen[uint64]](t, 5, 300) })
}
