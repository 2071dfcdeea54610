package runtime_test

// Adversarial review of issue 17 (the rewritten hot path): the default
// codec's fast path encodes requests and responses through a pointer
// "where that encodes the same bytes", decodes replays with a reused
// json.Decoder, and memstore keeps the slices it is given. These attacks
// check that what is stored is byte for byte what the codec (and so the
// previous version of the runtime) writes, and that records written by the
// previous version still replay.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// textOnValue has MarshalText on its value and MarshalJSON on its pointer:
// encoding/json calls MarshalText for a value that is not addressable (what
// json.Marshal(v) sees) and MarshalJSON for an addressable one (what it sees
// through a pointer).
type textOnValue struct{ N int }

func (t textOnValue) MarshalText() ([]byte, error) { return []byte("text"), nil }

func (t *textOnValue) MarshalJSON() ([]byte, error) { return []byte(`"json"`), nil }

func (t *textOnValue) UnmarshalText(b []byte) error { t.N = len(b); return nil }

type review17Req struct {
	Amount int         `json:"amount"`
	Tag    textOnValue `json:"tag"`
}

type review17Resp struct {
	ID  string      `json:"id"`
	Tag textOnValue `json:"tag"`
}

type plainReq struct {
	Amount int               `json:"amount"`
	Note   string            `json:"note"`
	Tags   []string          `json:"tags"`
	Meta   map[string]string `json:"meta"`
	When   time.Time         `json:"when"`
	Raw    json.RawMessage   `json:"raw"`
}

type plainResp struct {
	ID    string          `json:"id"`
	Items []int           `json:"items"`
	Raw   json.RawMessage `json:"raw"`
	Ptr   *string         `json:"ptr"`
}

// Promise: the stored request and its fingerprint are the codec's encoding
// of Call.Request (json.Marshal for the default codec, as the previous
// version wrote them), and the stored response is json.Marshal of the
// response: a record written before the rewrite must keep matching its
// retries after it. Schedule: a first call on memstore, then the record is
// compared with json.Marshal of the same values.
func TestReview17StoredFormIsTheCodecs(t *testing.T) {
	when := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	s := "p"
	cases := []struct {
		name     string
		run      func(ctx context.Context, rt *runtime.Runtime) error
		req      any
		resp     any
		wantResp bool
	}{
		{
			name: "plain types",
			req:  plainReq{Amount: 1, Note: "<a&b>", Tags: []string{"x"}, Meta: map[string]string{"b": "1", "a": "2"}, When: when, Raw: json.RawMessage(`{"z":1}`)},
			resp: plainResp{ID: "ch_1", Items: []int{1, 2}, Raw: json.RawMessage(`[1]`), Ptr: &s},
			run: func(ctx context.Context, rt *runtime.Runtime) error {
				_, err := runtime.Do(ctx, rt, runtime.Call[plainReq, plainResp]{Operation: "R17.Form", Key: "k",
					Request: plainReq{Amount: 1, Note: "<a&b>", Tags: []string{"x"}, Meta: map[string]string{"b": "1", "a": "2"}, When: when, Raw: json.RawMessage(`{"z":1}`)},
					Effect: func(context.Context, plainReq) (plainResp, error) {
						return plainResp{ID: "ch_1", Items: []int{1, 2}, Raw: json.RawMessage(`[1]`), Ptr: &s}, nil
					}})
				return err
			},
			wantResp: true,
		},
		{
			name: "value MarshalText, pointer MarshalJSON",
			req:  review17Req{Amount: 1},
			resp: review17Resp{ID: "ch_1"},
			run: func(ctx context.Context, rt *runtime.Runtime) error {
				_, err := runtime.Do(ctx, rt, runtime.Call[review17Req, review17Resp]{Operation: "R17.Form", Key: "k",
					Request: review17Req{Amount: 1},
					Effect: func(context.Context, review17Req) (review17Resp, error) {
						return review17Resp{ID: "ch_1"}, nil
					}})
				return err
			},
			wantResp: true,
		},
		{
			name: "top-level value MarshalText, pointer MarshalJSON",
			req:  textOnValue{N: 1},
			resp: textOnValue{N: 2},
			run: func(ctx context.Context, rt *runtime.Runtime) error {
				_, err := runtime.Do(ctx, rt, runtime.Call[textOnValue, textOnValue]{Operation: "R17.Form", Key: "k",
					Request: textOnValue{N: 1},
					Effect: func(context.Context, textOnValue) (textOnValue, error) {
						return textOnValue{N: 2}, nil
					}})
				return err
			},
			wantResp: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.New()
			rt, err := runtime.New(store)
			if err != nil {
				t.Fatal(err)
			}
			ctx := runtime.WithScope(context.Background(), "r17")
			if err := tc.run(ctx, rt); err != nil {
				t.Fatal(err)
			}
			rec, err := store.Get(ctx, runtime.Identity{Scope: "r17", Operation: "R17.Form", Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			wantReq, _ := json.Marshal(tc.req)
			if string(rec.Request) != string(wantReq) {
				t.Errorf("stored request %s, want json.Marshal's %s", rec.Request, wantReq)
			}
			if sum := sha256.Sum256(wantReq); string(rec.Fingerprint) != string(sum[:]) {
				t.Errorf("stored fingerprint is not the SHA-256 of json.Marshal(request): a record written by the previous version answers ErrKeyReused to its own retry")
			}
			if tc.wantResp {
				wantResp, _ := json.Marshal(tc.resp)
				if string(rec.Response) != string(wantResp) {
					t.Errorf("stored response %s, want json.Marshal's %s", rec.Response, wantResp)
				}
			}
		})
	}
}

// Promise: a record written by the previous version of the code (fingerprint
// = SHA-256 of json.Marshal(request), response = json.Marshal(response))
// replays to a retry after the upgrade, without running the effect.
// Schedule: the record is written through the store as the old runtime
// did (Claim, then Transition to SUCCESS), then the retry runs.
func TestReview17OldRecordsReplay(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		req := plainReq{Amount: 7, Note: "x", Tags: []string{"a"}}
		old := plainResp{ID: "ch_old", Items: []int{3}, Raw: json.RawMessage(`{"k":"v"}`)}
		got, runs, err := replayOld(t, req, old)
		if err != nil || runs != 0 || got.ID != "ch_old" || string(got.Raw) != `{"k":"v"}` || len(got.Items) != 1 {
			t.Fatalf("retry after the upgrade: %+v, %v, effect ran %d times; want the old response replayed", got, err, runs)
		}
	})
	t.Run("value MarshalText, pointer MarshalJSON", func(t *testing.T) {
		got, runs, err := replayOld(t, review17Req{Amount: 7}, review17Resp{ID: "ch_old"})
		if err != nil || runs != 0 || got.ID != "ch_old" {
			t.Fatalf("retry after the upgrade: %+v, %v, effect ran %d times; want the old response replayed", got, err, runs)
		}
	})
}

func replayOld[Req, Resp any](t *testing.T, req Req, old Resp) (Resp, int32, error) {
	t.Helper()
	store := memstore.New()
	ctx := runtime.WithScope(context.Background(), "r17")
	id := runtime.Identity{Scope: "r17", Operation: "R17.Old", Key: "k"}
	reqBytes, _ := json.Marshal(req)
	respBytes, _ := json.Marshal(old)
	sum := sha256.Sum256(reqBytes)
	res, err := store.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: sum[:], Request: reqBytes, Owner: "old-version", Lease: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatalf("seeding: %+v %v", res, err)
	}
	if _, err := store.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, To: runtime.StateSuccess,
		Owner: "old-version", Version: res.Record.Version, Response: respBytes, TTL: time.Hour, Token: "old#1"}); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	got, err := runtime.Do(ctx, rt, runtime.Call[Req, Resp]{Operation: id.Operation, Key: id.Key, Request: req,
		Effect: func(context.Context, Req) (Resp, error) {
			runs.Add(1)
			var zero Resp
			return zero, nil
		}})
	return got, runs.Load(), err
}

// Promise: memstore keeps the slices it is given, "immutable once handed
// over": a caller that reuses its own slices after Do returns, or an effect
// that mutates the request, must not change the record. Schedule: the
// caller's Fingerprint slice, the request's slice and map are mutated inside
// the effect and after Do; then a retry with the original values replays,
// a retry with the mutated ones is ErrKeyReused, and the stored request is
// the original one.
func TestReview17MemstoreAliasing(t *testing.T) {
	store := memstore.New()
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r17")
	fp := []byte("fingerprint-AAAA")
	tags := []string{"a", "b"}
	meta := map[string]string{"k": "v"}
	var runs atomic.Int32
	call := runtime.Call[plainReq, plainResp]{Operation: "R17.Alias", Key: "k", Fingerprint: fp,
		Request: plainReq{Amount: 1, Tags: tags, Meta: meta},
		Effect: func(_ context.Context, r plainReq) (plainResp, error) {
			runs.Add(1)
			r.Tags[0] = "MUTATED"
			r.Meta["k"] = "MUTATED"
			return plainResp{ID: "ch_1", Items: []int{1, 2, 3}}, nil
		}}
	first, err := runtime.Do(ctx, rt, call)
	if err != nil {
		t.Fatal(err)
	}
	// The caller now reuses its buffers and mutates what it got.
	copy(fp, "fingerprint-BBBB")
	first.Items[0] = 99
	first.ID = "x"

	id := runtime.Identity{Scope: "r17", Operation: "R17.Alias", Key: "k"}
	rec, err := store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.Fingerprint) != "fingerprint-AAAA" {
		t.Fatalf("stored fingerprint became %q after the caller reused its slice", rec.Fingerprint)
	}
	if strings.Contains(string(rec.Request), "MUTATED") {
		t.Fatalf("stored request %s changed with the effect's mutation", rec.Request)
	}
	call.Fingerprint = []byte("fingerprint-AAAA")
	again, err := runtime.Do(ctx, rt, call)
	if err != nil || again.ID != "ch_1" || again.Items[0] != 1 || runs.Load() != 1 {
		t.Fatalf("replay: %+v %v (effect ran %d times); want the first response, once", again, err, runs.Load())
	}
	// The replayed response is the caller's own: mutating it changes no
	// later replay.
	again.Items[1] = 77
	third, err := runtime.Do(ctx, rt, call)
	if err != nil || third.Items[1] != 2 {
		t.Fatalf("second replay after mutating the first: %+v %v", third, err)
	}
	call.Fingerprint = []byte("fingerprint-BBBB")
	if _, err := runtime.Do(ctx, rt, call); !errors.Is(err, runtime.ErrKeyReused) {
		t.Fatalf("another fingerprint: %v, want ErrKeyReused", err)
	}
}

// Promise: a replay decodes as json.Unmarshal would, whatever the stored
// form: the reused decoder must not carry state from one replay into the
// next (numbers at the top level, trailing whitespace, a failed decode in
// between). Schedule: records of several forms replayed in turns through
// one runtime, each checked against json.Unmarshal of the same bytes.
func TestReview17ReusedDecoder(t *testing.T) {
	store := memstore.New()
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r17")
	forms := []string{`12`, `3.5e1`, `"s"`, ` 42 `, "7\n", `{"a":1}`, `[1,2]`, `null`, `{"a":1} `, `{"a":"\u00e9"}`, `1`}
	// A response type that takes any JSON value (the runtime refuses to
	// replay into an interface type itself: review r56).
	type anyResp = r17AnyValue
	for round := range 3 {
		for i, form := range forms {
			id := runtime.Identity{Scope: "r17", Operation: "R17.Dec", Key: strings.Repeat("k", i+1) + string(rune('a'+round))}
			fp := sha256.Sum256([]byte("req"))
			res, err := store.Claim(ctx, runtime.ClaimParams{ID: id, Fingerprint: fp[:], Owner: "o", Lease: time.Minute})
			if err != nil || !res.Claimed {
				t.Fatal(res, err)
			}
			if _, err := store.Transition(ctx, runtime.TransitionParams{ID: id, From: runtime.StateProcessing, To: runtime.StateSuccess,
				Owner: "o", Version: res.Record.Version, Response: []byte(form), TTL: time.Hour, Token: "t"}); err != nil {
				t.Fatal(err)
			}
			rec, _ := store.Get(ctx, id)
			got, err := runtime.Replay[anyResp](rt, rec, fp[:])
			var want r17AnyValue
			werr := json.Unmarshal([]byte(form), &want)
			if (err == nil) != (werr == nil) {
				t.Fatalf("round %d, form %q: replay error %v, json.Unmarshal's %v", round, form, err, werr)
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			if string(gb) != string(wb) {
				t.Fatalf("round %d, form %q: replayed %s, json.Unmarshal gives %s", round, form, gb, wb)
			}
		}
	}
}

// rawCodec passes []byte through as is (a common codec for services whose
// requests and responses are already encoded: protobuf bytes, signed
// payloads) and uses JSON for everything else. Its Marshal returns the
// caller's own slice, which the runtime.Codec interface does not forbid.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return json.Marshal(v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	if p, ok := v.(*[]byte); ok {
		*p = append([]byte(nil), data...)
		return nil
	}
	return json.Unmarshal(data, v)
}

// Promise: a record is not corrupted by what its caller does with its own
// buffers after Do returned. With a custom codec that passes []byte
// through, the request and the response bytes the runtime hands the store
// are the caller's and the effect's own slices; memstore (since issue 17)
// keeps them instead of copying. Schedule: the effect answers from a
// buffer it reuses, the caller reuses its request buffer; then a duplicate
// replays, and the stored request is read back.
func TestReview17MemstoreCustomCodecAliasing(t *testing.T) {
	store := memstore.New()
	rt, err := runtime.New(store, runtime.WithCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r17")
	respBuf := []byte("receipt:ch_1")
	reqBuf := []byte("charge:100")
	var runs atomic.Int32
	call := runtime.Call[[]byte, []byte]{Operation: "R17.Raw", Key: "k", Request: reqBuf,
		Effect: func(context.Context, []byte) ([]byte, error) { runs.Add(1); return respBuf, nil }}
	got, err := runtime.Do(ctx, rt, call)
	if err != nil || string(got) != "receipt:ch_1" {
		t.Fatalf("first call: %q, %v", got, err)
	}
	// Both buffers are reused for the next request.
	copy(respBuf, "receipt:ch_2")
	copy(reqBuf, "charge:999")

	rec, err := store.Get(ctx, runtime.Identity{Scope: "r17", Operation: "R17.Raw", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.Request) != "charge:100" {
		t.Errorf("stored request became %q after the caller reused its buffer", rec.Request)
	}
	call.Request = []byte("charge:100")
	again, err := runtime.Do(ctx, rt, call)
	if err != nil || string(again) != "receipt:ch_1" || runs.Load() != 1 {
		t.Errorf("duplicate: %q, %v (effect ran %d times); want the first response %q replayed", again, err, runs.Load(), "receipt:ch_1")
	}
}

// Promise: memstore keeps the slices it is given "as the runtime.Store
// contract allows ... a caller never modifies the slices it passed", and
// the runtime keeps that rule for what it hands over. runtime.Resolve
// hands the store the operator's Response slice: an admin handler of a
// single-process service that resolves from a buffer it reuses (a pooled
// request body) must not rewrite the resolved record. Schedule: a record
// left UNKNOWN; Resolve to success from a buffer; the buffer is reused;
// a retry replays.
func TestReview17ResolveKeepsItsBytes(t *testing.T) {
	store := memstore.New()
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := runtime.WithScope(context.Background(), "r17")
	call := runtime.Call[plainReq, plainResp]{Operation: "R17.Resolve", Key: "k", Request: plainReq{Amount: 1},
		Effect: func(context.Context, plainReq) (plainResp, error) { return plainResp{}, errors.New("gateway timeout") }}
	if _, err := runtime.Do(ctx, rt, call); !errors.Is(err, runtime.ErrOutcomeUnknown) {
		t.Fatalf("setup: %v, want UNKNOWN", err)
	}
	buf := []byte(`{"id":"ch_resolved"}`)
	if _, err := runtime.Resolve(ctx, store, runtime.Resolution{ID: runtime.Identity{Scope: "r17", Operation: "R17.Resolve", Key: "k"},
		To: runtime.ResolveSuccess, Response: buf, Reason: "checked the gateway", Owner: "admin"}); err != nil {
		t.Fatal(err)
	}
	copy(buf, `{"id":"ch_XXXXXXXX"}`) // the admin handler's buffer serves the next request
	got, err := runtime.Do(ctx, rt, call)
	if err != nil || got.ID != "ch_resolved" {
		t.Fatalf("retry after the resolution: %+v, %v; want the resolved response ch_resolved", got, err)
	}
}

// sharingCodec passes []byte through both ways: Marshal returns its
// argument, Unmarshal into a *[]byte keeps the slice it is given. The
// runtime.Codec doc (since the fix of TestReview17MemstoreCustomCodecAliasing)
// allows both: "It may return a slice it shares with its argument and keep
// slices of what it decodes: the runtime copies what Marshal returns before
// a store keeps it, and hands Unmarshal a copy of the stored bytes."
type sharingCodec struct{}

func (sharingCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return json.Marshal(v)
}

func (sharingCodec) Unmarshal(data []byte, v any) error {
	if p, ok := v.(*[]byte); ok {
		*p = data
		return nil
	}
	return json.Unmarshal(data, v)
}

// Promise: as above, on the paths that converge an UNKNOWN record: the
// inline query of a retry, and the reconciler's registered query. The
// query's answer is stored, then the query's owner reuses its buffer; the
// reconciler's query gets the stored request, decoded, and normalises it
// in place (the inline query gets the caller's own request and leaves it).
// Schedule: per path, an effect that fails unclassified (UNKNOWN), then
// the convergence, then the buffers are reused, then a duplicate replays
// and the stored request is read back.
func TestReview17CodecAliasingOnConvergence(t *testing.T) {
	for _, path := range []string{"inline query", "reconciler"} {
		t.Run(path, func(t *testing.T) {
			store := memstore.New()
			rt, err := runtime.New(store, runtime.WithCodec(sharingCodec{}))
			if err != nil {
				t.Fatal(err)
			}
			ctx := runtime.WithScope(context.Background(), "r17")
			answer := []byte("receipt:ch_1")
			query := func(_ context.Context, req []byte) ([]byte, runtime.Outcome, error) {
				if path == "reconciler" {
					// The request the reconciler decoded: the query's own
					// copy, the Codec doc says.
					copy(req, "NORMALISED")
				}
				return answer, runtime.OutcomeSucceeded, nil
			}
			call := runtime.Call[[]byte, []byte]{Operation: "R17.Conv", Key: "k", Request: []byte("charge:100"),
				Effect: func(context.Context, []byte) ([]byte, error) { return nil, errors.New("gateway: connection reset") }}
			if _, err := runtime.Do(ctx, rt, call); !errors.Is(err, runtime.ErrOutcomeUnknown) {
				t.Fatalf("setup: %v, want UNKNOWN", err)
			}
			switch path {
			case "inline query":
				call.Query = query
				got, err := runtime.Do(ctx, rt, call)
				if err != nil || string(got) != "receipt:ch_1" {
					t.Fatalf("converging retry: %q %v", got, err)
				}
			case "reconciler":
				if err := runtime.Register(rt, "R17.Conv", query, runtime.QueryOptions{}); err != nil {
					t.Fatal(err)
				}
				r, err := runtime.NewReconciler(rt)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.RunOnce(ctx); err != nil {
					t.Fatal(err)
				}
			}
			copy(answer, "receipt:ch_2") // the query's client reuses its buffer
			rec, err := store.Get(ctx, runtime.Identity{Scope: "r17", Operation: "R17.Conv", Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != runtime.StateSuccess || string(rec.Response) != "receipt:ch_1" || string(rec.Request) != "charge:100" {
				t.Errorf("record after convergence and the query's buffers reused: %s response %q request %q; want SUCCESS %q %q",
					rec.State, rec.Response, rec.Request, "receipt:ch_1", "charge:100")
			}
			call.Query = nil
			if got, err := runtime.Do(ctx, rt, call); err != nil || string(got) != "receipt:ch_1" {
				t.Errorf("replay: %q, %v; want receipt:ch_1", got, err)
			}
		})
	}
}

// r17AnyValue holds any JSON value, as json.Unmarshal into an any gives it.
type r17AnyValue struct{ V any }

func (v *r17AnyValue) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &v.V) }
func (v r17AnyValue) MarshalJSON() ([]byte, error)  { return json.Marshal(v.V) }
