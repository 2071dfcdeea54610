package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime/internal/jsonfast"
)

type valueKey struct{}

// TestEffectCtxActsAsWithCancelCause: the lazy effect context answers as
// context.WithCancelCause(withAttempt(parent)) does, whether or not it was
// made before the event.
func TestEffectCtxActsAsWithCancelCause(t *testing.T) {
	errCause := errors.New("the cause")
	tests := []struct {
		name string
		// early makes the cancelCtx first (Done), as an effect waiting on
		// its context does.
		early bool
		// act is what happens; then the context is checked.
		act       func(parent context.CancelFunc, c *effectCtx)
		wantErr   error
		wantCause error
	}{
		{"nothing", false, func(context.CancelFunc, *effectCtx) {}, nil, nil},
		{"nothing, made", true, func(context.CancelFunc, *effectCtx) {}, nil, nil},
		{"cancelled with a cause", false, func(_ context.CancelFunc, c *effectCtx) { c.cancelCause(errCause) }, context.Canceled, errCause},
		{"cancelled with a cause, made", true, func(_ context.CancelFunc, c *effectCtx) { c.cancelCause(errCause) }, context.Canceled, errCause},
		{"parent cancelled", false, func(p context.CancelFunc, _ *effectCtx) { p() }, context.Canceled, context.Canceled},
		{"parent cancelled, made", true, func(p context.CancelFunc, _ *effectCtx) { p() }, context.Canceled, context.Canceled},
		{"released", false, func(_ context.CancelFunc, c *effectCtx) { c.release() }, context.Canceled, context.Canceled},
		{"released, made", true, func(_ context.CancelFunc, c *effectCtx) { c.release() }, context.Canceled, context.Canceled},
		{"cancelled, then released", false, func(_ context.CancelFunc, c *effectCtx) { c.cancelCause(errCause); c.release() }, context.Canceled, errCause},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancel := context.WithCancel(context.WithValue(context.Background(), valueKey{}, "v"))
			defer cancel()
			c := new(effectCtx)
			c.init(parent, nil, Identity{Operation: "op", Key: "k"}, 7, true, "")
			var child context.Context
			if tc.early {
				_ = c.Done()
				var ccancel context.CancelFunc
				child, ccancel = context.WithTimeout(c, time.Hour)
				defer ccancel()
			}
			tc.act(cancel, c)
			if err := c.Err(); err != tc.wantErr {
				t.Errorf("Err() = %v, want %v", err, tc.wantErr)
			}
			if cause := context.Cause(c); cause != tc.wantCause {
				t.Errorf("Cause() = %v, want %v", cause, tc.wantCause)
			}
			done := tc.wantErr != nil
			select {
			case <-c.Done():
				if !done {
					t.Error("Done() is closed")
				}
			default:
				if done {
					t.Error("Done() is not closed")
				}
			}
			if child != nil && (child.Err() != nil) != done {
				t.Errorf("a context derived before: Err() = %v, want cancelled %v", child.Err(), done)
			}
			if tok, ok := FencingToken(c); !ok || tok != 7 {
				t.Errorf("FencingToken = %d, %v; want 7", tok, ok)
			}
			if v := c.Value(valueKey{}); v != "v" {
				t.Errorf("the parent's value = %v", v)
			}
		})
	}
}

// TestEffectCtxScope: a call's Scope is in its effect's context.
func TestEffectCtxScope(t *testing.T) {
	c := new(effectCtx)
	c.init(context.Background(), nil, Identity{}, 1, false, "tenant")
	if got := ScopeFrom(c); got != "tenant" {
		t.Errorf("ScopeFrom = %q, want tenant", got)
	}
	c = new(effectCtx)
	c.init(WithScope(context.Background(), "outer"), nil, Identity{}, 1, false, "")
	if got := ScopeFrom(c); got != "outer" {
		t.Errorf("ScopeFrom = %q, want outer", got)
	}
}

// TestCompletionCtxActsAsWithDeadline: the lazy completion context answers
// as context.WithDeadline(context.WithoutCancel(parent)) does.
func TestCompletionCtxActsAsWithDeadline(t *testing.T) {
	for _, early := range []bool{false, true} {
		parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), valueKey{}, "v"))
		cancel(errors.New("the caller went away")) // not the completion's concern
		c := &completionCtx{parent: parent, deadline: time.Now().Add(50 * time.Millisecond)}
		if early {
			_ = c.Done()
		}
		if err := c.Err(); err != nil {
			t.Fatalf("early=%v: before the deadline: Err() = %v", early, err)
		}
		// Value, and so context.Cause, asks the inner context too (as Done
		// does); then Err waits for the deadline's timer, which a loaded
		// machine runs late (a CI run under load saw Err() nil 10 ms past
		// the deadline when Cause had been asked here).
		if early {
			if cause := context.Cause(c); cause != nil {
				t.Fatalf("early=%v: before the deadline: Cause() = %v", early, cause)
			}
		}
		if c.ready.Load() != early {
			t.Fatalf("early=%v: the inner context made: %v", early, c.ready.Load())
		}
		time.Sleep(60 * time.Millisecond)
		// Without a Done channel asked for, Err reads the clock. With one,
		// as with context.WithDeadline, Err is set when the deadline's
		// timer fires, which a loaded machine runs late: Err is checked
		// once Done is closed.
		if err := c.Err(); !early && err != context.DeadlineExceeded {
			t.Errorf("early=%v: after the deadline: Err() = %v", early, err)
		}
		select {
		case <-c.Done():
		case <-time.After(time.Second):
			t.Errorf("early=%v: Done() not closed after the deadline", early)
		}
		if err := c.Err(); err != context.DeadlineExceeded {
			t.Errorf("early=%v: after Done: Err() = %v", early, err)
		}
		if cause := context.Cause(c); cause != context.DeadlineExceeded {
			t.Errorf("early=%v: Cause() = %v", early, cause)
		}
		if v := c.Value(valueKey{}); v != "v" {
			t.Errorf("early=%v: the parent's value = %v", early, v)
		}
		c.release()
		if err := c.Err(); err != context.DeadlineExceeded {
			t.Errorf("early=%v: released after the deadline: Err() = %v", early, err)
		}
	}
	c := &completionCtx{parent: context.Background(), deadline: time.Now().Add(time.Hour)}
	c.release()
	if err := c.Err(); err != context.Canceled {
		t.Errorf("released: Err() = %v, want Canceled", err)
	}
	<-c.Done()
}

type ptrMarshaler struct{ N int }

func (p *ptrMarshaler) MarshalJSON() ([]byte, error) { return []byte(`"pointer"`), nil }

type ptrText struct{ S string }

func (p *ptrText) MarshalText() ([]byte, error) { return []byte("text"), nil }

type valMarshaler struct{ N int }

// textThenJSON has MarshalText on its value and MarshalJSON on its
// pointer: json calls MarshalText on a value and MarshalJSON through a
// pointer.
type textThenJSON struct{ S string }

func (v textThenJSON) MarshalText() ([]byte, error)  { return []byte("text:" + v.S), nil }
func (p *textThenJSON) MarshalJSON() ([]byte, error) { return []byte(`"json:` + p.S + `"`), nil }

func (v valMarshaler) MarshalJSON() ([]byte, error) { return []byte(`"value"`), nil }

// TestEncodeRequestMatchesMarshal: the fast path encodes and fingerprints
// every request as json.Marshal of the value does, pointer-receiver
// marshalers included (json skips them on a value, calls them through a
// pointer), and through a jsonfast plan (fast) for the types that have one;
// encodeResponse writes the same bytes, and decodeResponse reads them back
// as json.Unmarshal does.
func TestEncodeRequestMatchesMarshal(t *testing.T) {
	rt, err := New(nopStore{})
	if err != nil {
		t.Fatal(err)
	}
	type plain struct {
		A string `json:"a"`
		B int
		C []byte
		D map[string]int
		E *ptrMarshaler
		F []ptrMarshaler
		G any
		H string `json:"<h>"`
	}
	type fieldPtr struct{ M ptrMarshaler }
	type fieldText struct{ T [2]ptrText }
	type deep struct{ In struct{ M ptrMarshaler } }
	type withValue struct{ V valMarshaler }
	type withTextThenJSON struct{ T textThenJSON }
	type item struct {
		SKU   string `json:"sku"`
		Qty   uint16 `json:"qty,omitempty"`
		Gift  bool   `json:"gift,omitempty"`
		Notes []string
	}
	type order struct {
		ID     string  `json:"<id>&"`
		Cents  int64   `json:"cents"`
		Min    int8    `json:"min"`
		Max    uint64  `json:"max"`
		Items  []item  `json:"items"`
		Ship   *item   `json:"ship,omitempty"`
		Prev   *string `json:"prev"`
		hidden string
		Skip   string `json:"-"`
	}
	prev := "\u2028 \u2029 \x00 \xff"
	tests := []struct {
		name string
		fast bool // the type has a jsonfast plan
		enc  func(*Runtime) (v any, fp, b, resp []byte, err error)
	}{
		{"plain", false, encodeCase(plain{A: "<x>", B: 1, C: []byte{1}, D: map[string]int{"b": 1, "a": 2}, E: &ptrMarshaler{}, F: []ptrMarshaler{{}}, G: ptrMarshaler{}})},
		{"pointer marshaler", false, encodeCase(ptrMarshaler{N: 3})},
		{"field with a pointer marshaler", false, encodeCase(fieldPtr{})},
		{"array of pointer text marshalers", false, encodeCase(fieldText{})},
		{"nested", false, encodeCase(deep{})},
		{"value marshaler", false, encodeCase(withValue{})},
		{"value text marshaler, pointer json marshaler", false, encodeCase(textThenJSON{S: "x"})},
		{"field with a value text marshaler and a pointer json marshaler", false, encodeCase(withTextThenJSON{T: textThenJSON{S: "y"}})},
		{"interface", false, encodeCase[any](ptrMarshaler{})},
		{"time", false, encodeCase(time.Date(2026, 12, 2, 1, 2, 3, 4, time.UTC))},
		{"planned zero", true, encodeCase(order{})},
		{"planned", true, encodeCase(order{ID: "<script>&amp;\u2028\x01\"\\\n\t\xc3(\U0001F600", Cents: -1 << 63, Min: -128, Max: 1<<64 - 1,
			Items: []item{{SKU: "a", Qty: 2, Gift: true, Notes: []string{}}, {}}, Ship: &item{Notes: []string{"é", ""}}, Prev: &prev, hidden: "h", Skip: "s"})},
		{"planned string", true, encodeCase("\ufffd\xff<>")},
		{"planned slice", true, encodeCase([]*item{nil, {SKU: "x"}})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, fp, got, resp, err := tc.enc(rt)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			// The fingerprint: SHA-256 of json.Marshal's bytes, or the
			// canonical one for a type whose JSON leaves a part out
			// (FingerprintOf takes the reflective path, never a plan).
			sum, err := rt.FingerprintOf(v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) || string(fp) != string(sum) {
				t.Errorf("encoded %s (fingerprint %x), want %s (json.Marshal of the value, fingerprint %x)", got, fp, want, sum)
			}
			if string(resp) != string(want) {
				t.Errorf("encoded response %s, want %s", resp, want)
			}
			if fast := jsonfast.Build(reflect.TypeOf(v)) != nil; fast != (tc.fast && jsonfast.Enabled) {
				t.Errorf("jsonfast plan: %v, want %v", fast, tc.fast)
			}
		})
	}
	t.Run("fingerprint given", func(t *testing.T) {
		for _, fast := range []bool{false, true} {
			var fp, b []byte
			given := []byte("mine")
			if fast {
				v := order{ID: "a"}
				fp, b, _ = encodeRequest(rt, &v, given)
			} else {
				v := plain{A: "a"}
				fp, b, _ = encodeRequest(rt, &v, given)
			}
			given[0] = 'X' // the caller's slice is not kept
			if string(fp) != "mine" || !strings.Contains(string(b), `":"a"`) {
				t.Errorf("fast %v: fingerprint %q, request %s", fast, fp, b)
			}
		}
	})
}

// encodeCase encodes v as a request and as a response, and checks that
// decodeResponse decodes the response as json.Unmarshal does (or refuses
// it, for an interface type).
func encodeCase[T any](v T) func(*Runtime) (any, []byte, []byte, []byte, error) {
	return func(rt *Runtime) (any, []byte, []byte, []byte, error) {
		fp, b, err := encodeRequest(rt, &v, nil)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		resp, err := encodeResponse(rt, &v)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		var got, want T
		gerr := decodeResponse(rt, resp, &got)
		if interfaceResponse(reflect.TypeFor[T]()) {
			// Refused: JSON would give its generic values, not the
			// response's type (review r56).
			if gerr == nil {
				return nil, nil, nil, nil, fmt.Errorf("decodeResponse(%s) into an interface: %#v, no error", resp, got)
			}
			return v, fp, b, resp, nil
		}
		werr := json.Unmarshal(resp, &want)
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			return nil, nil, nil, nil, fmt.Errorf("decodeResponse(%s): %#v, %v; json.Unmarshal: %#v, %v", resp, got, gerr, want, werr)
		}
		return v, fp, b, resp, nil
	}
}

// TestDecodeResponseMatchesUnmarshal: the jsonfast plan and the reused
// decoder decode as json.Unmarshal does, and say what it says about bad
// input.
func TestDecodeResponseMatchesUnmarshal(t *testing.T) {
	rt, err := New(nopStore{})
	if err != nil {
		t.Fatal(err)
	}
	type resp struct {
		A string `json:"a"`
		B int    `json:"b"`
	}
	for _, data := range []string{
		`{"a":"x","b":1}`, `{"a":"y"}`, `{"a":"x","b":1} `, `{"a":"x"} {"a":"y"}`, `{"a":"x"`, `{"b":"not a number","a":"z"}`, `null`, ``, `{"a":"x","b":1}`,
		// Not what json.Marshal writes (an older version, another codec, a
		// hand edit): jsonfast leaves them to encoding/json.
		`{"b":1,"a":"x"}`, `{"A":"\u0041\/","B":2}`, `{ "a" : "x" }`, `{"a":"x","b":1,"c":3}`, `{"a":"x","b":1.5}`, `{"a":"x","b":99999999999999999999}`,
		`{"a":"x","a":"y"}`, `{"a":"\ud83d\ude00","b":-0}`, "{\"a\":\"\xff\"}", `{"a":"x","b":1,}`,
	} {
		var got, want resp
		gerr := decodeResponse(rt, []byte(data), &got)
		werr := json.Unmarshal([]byte(data), &want)
		if got != want || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Errorf("%s: decoded %+v, %v; json.Unmarshal: %+v, %v", data, got, gerr, want, werr)
		}
	}
}

// nopStore is a Store for tests that never reach it.
type nopStore struct{ Store }
