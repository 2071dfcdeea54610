package idemhttp

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/runtime/internal/jsonfast"
)

// The stored form, as records have been stored since issue 12: a change
// here breaks the records already stored (and idemctl's view of them).
func TestResponseStoredForm(t *testing.T) {
	got, err := json.Marshal(Response{Status: 201, Header: http.Header{"X-B": {"2"}, "Content-Type": {"application/json"}}, Body: []byte(`{"charge":"ch_1"}`)})
	want := `{"status":201,"header":{"Content-Type":["application/json"],"X-B":["2"]},"body":"eyJjaGFyZ2UiOiJjaF8xIn0="}`
	if err != nil || string(got) != want {
		t.Errorf("got %s, %v\nwant %s", got, err, want)
	}
	got, _ = json.Marshal(Response{Status: 200, Streamed: true})
	if want := `{"status":200,"header":null,"body":null,"streamed":true}`; string(got) != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

var codecCases = []Response{
	{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"charge":"ch_1"}`)},
	{Status: 200},
	{Status: 204, Header: http.Header{}, Body: []byte{}},
	{Status: 200, Header: http.Header{"X-B": {"2"}, "X-A": {"1", "one"}, "Content-Type": {"text/plain"}, "X-Empty": {}}, Streamed: true},
	{Status: 200, Header: http.Header{"X-Nil": nil, "X-Html": {"<a href=\"x\">&amp;</a>"}}},
	{Status: 200, Header: http.Header{"X-Utf8": {"café ☕", "\u2028\u2029"}, "X-Bad": {"\xff\xfe"}, "X-Ctl": {"a\tb\nc\x00\x7f"}}},
	{Status: 200, Header: http.Header{"x-lower": {"v"}, "X-Lower": {"w"}}, Body: []byte("\x00\xff binary")},
	{Status: 999, Header: http.Header{"K": {strings.Repeat("v", 300)}}, Body: []byte(strings.Repeat("b", 1000))},
}

// The one-pass reader reads every record as the general one does, and
// leaves to it whatever it cannot read exactly.
func TestResponseUnmarshalAsGeneral(t *testing.T) {
	inputs := []string{
		`{"status":201,"header":{"Content-Type":["application/json"]},"body":"e30=","streamed":true}`,
		`{"status":201,"header":{"content-type":["a"],"Content-Type":["b"]},"body":null}`,
		`{"status":201,"header":{"X":["a\"b"]},"body":null}`,
		`{"status":201,"header":{"X":null},"body":null}`,
		`{"status":100,"header":{"X":["a"],"X":[]},"body":""}`, // the last of a name wins
		`{"status":100,"header":{"X":[]},"body":""}`,
		`{"status":201,"header":{"X":["caf\u00e9"]},"body":"e30="}`,
		`{"status":201,"header":{"X":["café"]},"body":"e30="}`,
		`{"status":201,"header":{},"body":""}`,
		`{"status":201,"header":null,"body":"e30"}`,
		`{"status":201,"header":null,"body":"e3\n0="}`,
		`{"status":99,"header":null,"body":null}`,
		`{"status":201.0,"header":null,"body":null}`,
		`{"status": 201, "headers": {"Content-Type": "application/json"}, "body": {"charge": "ch_1"}}`,
		`{"header":null,"status":201,"body":null}`,
		`{"status":201,"header":null,"body":null,"streamed":false}`,
		`{"status":201,"header":null,"body":null}  `,
	}
	for _, r := range codecCases {
		b, _ := json.Marshal(r)
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		var fast, general Response
		errFast := json.Unmarshal([]byte(in), &fast)
		errGeneral := general.unmarshalAny([]byte(in))
		if (errFast == nil) != (errGeneral == nil) || !reflect.DeepEqual(sorted(fast), sorted(general)) {
			t.Errorf("%s:\n one pass %#v, %v\n general  %#v, %v", in, fast, errFast, general, errGeneral)
		}
	}
	// The stored form of an ordinary response takes the one pass.
	b, _ := json.Marshal(codecCases[0])
	if _, ok := parseStored(b); !ok {
		t.Errorf("%s: not read in one pass", b)
	}
}

// sorted sorts the values of each header: the general reader merges two
// names that canonicalize alike in the map's order, the one pass in the
// record's.
func sorted(r Response) Response {
	for _, vs := range r.Header {
		slices.Sort(vs)
	}
	return r
}

func FuzzResponseCodec(f *testing.F) {
	for _, r := range codecCases {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		fast, ok := parseStored(b)
		if !ok {
			return
		}
		var general Response
		if err := general.unmarshalAny(b); err != nil || !reflect.DeepEqual(sorted(fast), sorted(general)) {
			t.Fatalf("%s:\n one pass %#v\n general  %#v, %v", b, fast, general, err)
		}
	})
}

// The types the middleware stores have jsonfast plans (the runtime's fast
// path for the default codec): a method json calls, or a field of a type
// outside the plans, would send every call back through encoding/json's
// reflection. Through the plans, requests and responses are encoded as
// json.Marshal encodes them and decoded as json.Unmarshal decodes them
// (a Response by its UnmarshalJSON, given the same bytes).
func TestStoredTypesOnFastPath(t *testing.T) {
	reqPlan, respPlan := jsonfast.Build(reflect.TypeFor[request]()), jsonfast.Build(reflect.TypeFor[Response]())
	if !jsonfast.Enabled {
		// GOEXPERIMENT=jsonv2: no plans, every type goes to encoding/json.
		if reqPlan != nil || respPlan != nil {
			t.Fatalf("jsonfast is off, yet plans: request %v, Response %v", reqPlan != nil, respPlan != nil)
		}
		return
	}
	if reqPlan == nil || respPlan == nil {
		t.Fatalf("jsonfast plans: request %v, Response %v", reqPlan != nil, respPlan != nil)
	}
	for _, req := range []request{
		{},
		{Method: "POST", Target: "/charges?a=<b>", BodyLen: 3, BodySHA256: "ab", URL: "http://h/x", Body: []byte("a\x00\xff")},
		{Method: "PUT", Body: []byte{}},
	} {
		want, err := json.Marshal(req)
		if got := jsonfast.Encode(reqPlan, nil, &req); err != nil || string(got) != string(want) {
			t.Errorf("request %+v:\nEncode       %s\njson.Marshal %s, %v", req, got, want, err)
		}
	}
	inputs := []string{
		`{"status":201,"header":{"content-type":"text/plain"},"body":{"a":1}}`, // resolved by hand
		` {"status":200,"header":null,"body":null}`,
		`null`, `{"status":"x"}`, `{"status":200`,
	}
	for _, r := range codecCases {
		want, err := json.Marshal(r)
		if got := jsonfast.Encode(respPlan, nil, &r); err != nil || string(got) != string(want) {
			t.Errorf("%+v:\nEncode       %s\njson.Marshal %s, %v", r, got, want, err)
		}
		inputs = append(inputs, string(want))
	}
	for _, in := range inputs {
		var fast, general Response
		ok := jsonfast.Decode(respPlan, []byte(in), &fast)
		err := json.Unmarshal([]byte(in), &general)
		if ok && (err != nil || !reflect.DeepEqual(fast, general)) {
			t.Errorf("%s:\nDecode         %#v\njson.Unmarshal %#v, %v", in, fast, general, err)
		}
		if !ok && err == nil && json.Valid([]byte(in)) && in[0] != ' ' {
			t.Errorf("%s: Decode turns down a value UnmarshalJSON reads", in)
		}
	}
}

// parseStored makes the same allocations however many headers a record
// has: the map, one string for every name and value, one []string for
// every header's values, the body.
func TestParseStoredAllocs(t *testing.T) {
	one := `{"status":201,"header":{"Content-Type":["application/json"]},"body":"eyJ9"}`
	many := `{"status":201,"header":{"A":["1"],"B":["2","3"],"C":["4"],"Content-Type":["application/json"],"X-Empty":[]},"body":"eyJ9"}`
	allocs := func(in string) float64 {
		if _, ok := parseStored([]byte(in)); !ok {
			t.Fatalf("parseStored turns down %s", in)
		}
		return testing.AllocsPerRun(100, func() { _, _ = parseStored([]byte(in)) })
	}
	if a, b := allocs(one), allocs(many); a != b {
		t.Errorf("%v allocations for one header, %v for five", a, b)
	}
	r, _ := parseStored([]byte(many))
	r.Header["A"] = append(r.Header["A"], "x") // must not write over B's values
	if got := r.Header["B"]; !slices.Equal(got, []string{"2", "3"}) || r.Header["X-Empty"] != nil {
		t.Errorf("B %q, X-Empty %#v", got, r.Header["X-Empty"])
	}
}

// TestHeaderNamesMergeInOneOrder: a stored record with two names of one
// header (a handler that set w.Header()["x-id"] beside "X-Id") is read with
// their values in one order, the stored form's, on every replay (the
// general reader iterated a map).
func TestHeaderNamesMergeInOneOrder(t *testing.T) {
	for _, stored := range []string{
		`{"status":200,"header":{"X-Id":["w"],"x-id":["v"]},"body":"e30="}`,
		`{"status": 200, "headers": {"X-Id": "w", "x-id": "v", "x-ID": ["u"]}}`,
	} {
		var first Response
		if err := json.Unmarshal([]byte(stored), &first); err != nil {
			t.Fatal(err)
		}
		for range 50 {
			var r Response
			if err := json.Unmarshal([]byte(stored), &r); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Header, first.Header) {
				t.Fatalf("%s: headers %v, then %v", stored, first.Header, r.Header)
			}
		}
	}
}
