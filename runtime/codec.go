package runtime

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/idemkit/idem/runtime/internal/canon"
	"github.com/idemkit/idem/runtime/internal/jsonfast"
)

// Codec encodes requests (for fingerprints and reconciliation) and responses
// (for replay). It must be deterministic: the same value must always encode to
// the same bytes, or identical requests would look like key reuse. It may
// return a slice it shares with its argument and keep slices of what it
// decodes: the runtime copies what Marshal returns before a store keeps it,
// and hands Unmarshal a copy of the stored bytes.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default [Codec], built on encoding/json (which sorts map
// keys and so is deterministic).
//
// A runtime with JSONCodec encodes and decodes a type made only of strings,
// bools, integers, byte slices, structs of these (no embedded fields),
// pointers, slices and string-keyed maps of them, with no method
// encoding/json would call (except an UnmarshalJSON on the top type, which
// decoding calls), without encoding/json's reflection (off under
// GOEXPERIMENT=jsonv2, whose encoding/json writes other bytes): it writes
// json.Marshal's bytes to
// the byte, and reads a stored response that way only when it is exactly
// those bytes (anything else, such as a record an older version, another
// codec or a hand edit wrote, is decoded by json.Unmarshal). Fingerprints
// and stored records are the same either way. Another Codec, including one
// that wraps JSONCodec, is called through Marshal and Unmarshal.
type JSONCodec struct{}

// Marshal implements [Codec].
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal implements [Codec].
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// encoders is a runtime's fast path for the default codec. A type in
// jsonfast's subset (structs of strings, bools, integers, byte slices,
// pointers, slices and string-keyed maps of these; at the top, a type whose
// pointer has an UnmarshalJSON, which decoding calls) is encoded and
// decoded by its jsonfast plan, which writes json.Marshal's bytes and reads
// back only those (anything else it leaves to encoding/json); other types
// go through encoding/json. Requests
// are encoded into a reused buffer, then copied once into the slice that
// carries the fingerprint and the request together; values are handed to
// encoding/json through a pointer (no copy into an interface) where that
// encodes the same bytes.
type encoders struct {
	plans jsonfast.Cache
	// canon knows, by type, whether json's encoding covers a request
	// whole (see [requestFingerprint]).
	canon canon.Cache
	pool  sync.Pool // *jsonEncoder, used by one call at a time
	dec   sync.Pool // *jsonDecoder, used by one call at a time
	// addr caches jsonAddrSafe by type (reflect.Type -> bool).
	addr sync.Map
}

type jsonEncoder struct {
	buf     bytes.Buffer
	enc     *json.Encoder // on buf, made on first use
	scratch []byte        // for jsonfast.Encode
}

// maxPooledEncoder is the largest buffer returned to the pool: a rare huge
// request does not pin its memory.
const maxPooledEncoder = 64 << 10

// request encodes v with encoding/json and returns the fingerprint
// (fingerprint itself when not nil, else the SHA-256 of the encoding) and
// the encoding, in one allocation that nothing else holds.
func (e *encoders) request(v any, fingerprint []byte) (fp, req []byte, err error) {
	je := e.get()
	defer e.put(je)
	if je.enc == nil {
		je.enc = json.NewEncoder(&je.buf)
	}
	je.buf.Reset()
	// Encode writes what json.Marshal returns (HTML-escaped), and a newline.
	if err := je.enc.Encode(v); err != nil {
		return nil, nil, err
	}
	b := je.buf.Bytes()
	fp, req = withFingerprint(b[:len(b)-1], fingerprint)
	return fp, req, nil
}

// requestPlan is [encoders.request] for a type with a plan.
func requestPlan[T any](e *encoders, p *jsonfast.Plan, v *T, fingerprint []byte) (fp, req []byte) {
	je := e.get()
	je.scratch = jsonfast.Encode(p, je.scratch[:0], v)
	fp, req = withFingerprint(je.scratch, fingerprint)
	e.put(je)
	return fp, req
}

// withFingerprint returns the fingerprint (fingerprint itself when not nil,
// else the SHA-256 of b) and a copy of b, in one new allocation.
func withFingerprint(b, fingerprint []byte) (fp, req []byte) {
	n := sha256.Size
	if fingerprint != nil {
		n = len(fingerprint)
	}
	out := make([]byte, n+len(b))
	copy(out[n:], b)
	if fingerprint != nil {
		copy(out, fingerprint)
	} else {
		sum := sha256.Sum256(b)
		copy(out, sum[:])
	}
	return out[:n:n], out[n:]
}

// get returns a pooled encoder; put gives it back unless it grew too big
// to keep.
func (e *encoders) get() *jsonEncoder {
	je, _ := e.pool.Get().(*jsonEncoder)
	if je == nil {
		je = new(jsonEncoder)
	}
	return je
}

func (e *encoders) put(je *jsonEncoder) {
	if je.buf.Cap() <= maxPooledEncoder && cap(je.scratch) <= maxPooledEncoder {
		e.pool.Put(je)
	}
}

// jsonValue returns what to hand encoding/json for *v: v itself when that
// encodes as *v does (no copy of *v into an interface), else *v.
func jsonValue[T any](rt *Runtime, v *T) any {
	t := reflect.TypeFor[T]()
	safe, ok := rt.enc.addr.Load(t)
	if !ok {
		safe, _ = rt.enc.addr.LoadOrStore(t, jsonAddrSafe(t))
	}
	if safe.(bool) {
		return v
	}
	return *v
}

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// jsonAddrSafe reports whether encoding/json encodes a pointer to a t as it
// encodes the t itself. Through a pointer, t and the fields and array
// elements it holds by value become addressable, and json then calls a
// MarshalJSON or MarshalText declared on their pointer type, which it does
// not call on the value: such a type anywhere in t makes it unsafe.
// Elements behind pointers, slices, maps and interfaces are addressable
// (or not) either way.
func jsonAddrSafe(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Interface:
		return false
	case reflect.Pointer:
		return true
	}
	// json's order: MarshalJSON (on the value, else through an address),
	// then MarshalText (likewise). A method the value has ends the walk,
	// unless the pointer has one that json would pick before it.
	pt := reflect.PointerTo(t)
	switch {
	case t.Implements(jsonMarshalerType):
		return true
	case pt.Implements(jsonMarshalerType):
		return false
	case t.Implements(textMarshalerType):
		return true
	case pt.Implements(textMarshalerType):
		return false
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			if ft := t.Field(i).Type; ft.Kind() != reflect.Interface && !jsonAddrSafe(ft) {
				return false
			}
		}
	case reflect.Array:
		if et := t.Elem(); et.Kind() != reflect.Interface && !jsonAddrSafe(et) {
			return false
		}
	}
	return true
}

// encodeRequest encodes *req with the runtime's codec and returns the
// fingerprint (see [Call.Fingerprint]) and the encoding, both fresh slices
// that the caller never modifies afterwards (a store may keep them).
func encodeRequest[Req any](rt *Runtime, req *Req, fingerprint []byte) (fp, b []byte, err error) {
	if _, ok := rt.cfg.codec.(JSONCodec); ok {
		if fingerprint == nil {
			if fingerprint, err = requestFingerprint(&rt.enc.canon, req); err != nil {
				return nil, nil, err
			}
		}
		covered := fingerprint == nil
		if p := jsonfast.For[Req](&rt.enc.plans); p != nil {
			fp, b = requestPlan(&rt.enc, p, req, fingerprint)
		} else if fp, b, err = rt.enc.request(jsonValue(rt, req), fingerprint); err != nil {
			return nil, nil, err
		}
		if covered && canon.LossyUTF8(b) {
			sum, err := canonicalFingerprint(&rt.enc.canon, reflect.ValueOf(req).Elem())
			if err != nil {
				return nil, nil, err
			}
			copy(fp, sum) // fp is b's fresh SHA-256, of the same size
		}
		return fp, b, nil
	}
	if b, err = rt.cfg.codec.Marshal(*req); err != nil {
		return nil, nil, err
	}
	// A Codec may hand back a slice its caller still owns (one that passes
	// []byte through): the store keeps what it is given.
	b = bytes.Clone(b)
	if fingerprint == nil {
		return Fingerprint(b), b, nil
	}
	return bytes.Clone(fingerprint), b, nil
}

// requestFingerprint returns nil when json's encoding of *req holds all of
// it (the fingerprint is then the SHA-256 of that encoding, as it always
// was), else the SHA-256 of the canonical encoding of every part of *req
// (see package canon): a request with unexported fields, fields tagged
// `json:"-"` or fields json drops as shadowed is compared whole, though its
// stored encoding (what replays and queries see) still leaves them out.
func requestFingerprint[Req any](c *canon.Cache, req *Req) ([]byte, error) {
	t := reflect.TypeFor[Req]()
	if t.Kind() == reflect.Interface {
		// The request is the dynamic value, as json sees it: the same
		// value fingerprints the same through Do[any] and Do[T].
		return valueFingerprint(c, reflect.ValueOf(req).Elem().Elem())
	}
	ti := c.Info(t)
	if ti.Covered && !ti.Dynamic {
		return nil, nil
	}
	v := reflect.ValueOf(req).Elem()
	if ti.Covered && c.ValueCovered(v) {
		return nil, nil
	}
	return canonicalFingerprint(c, v)
}

// valueFingerprint is [requestFingerprint] for a dynamic value (invalid
// for nil, which json encodes whole as null).
func valueFingerprint(c *canon.Cache, v reflect.Value) ([]byte, error) {
	if !v.IsValid() {
		return nil, nil
	}
	if ti := c.Info(v.Type()); ti.Covered && (!ti.Dynamic || c.ValueCovered(v)) {
		return nil, nil
	}
	return canonicalFingerprint(c, v)
}

// canonicalFingerprint returns the SHA-256 of the canonical encoding of v.
func canonicalFingerprint(c *canon.Cache, v reflect.Value) ([]byte, error) {
	if v.Kind() == reflect.Interface {
		v = v.Elem() // the dynamic value, as in requestFingerprint
	}
	h := sha256.New()
	if err := c.Write(h, v); err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	return h.Sum(nil), nil
}

// encodeResponse encodes *resp with the runtime's codec. A panic in the
// encoding (a MarshalJSON, a Codec) is its error: the effect ran, and the
// call records its outcome without the response rather than stop half
// way with its claim held (and, in a local call, its writes kept).
func encodeResponse[Resp any](rt *Runtime, resp *Resp) (b []byte, err error) {
	returned := false
	defer func() {
		if !returned {
			b, err = nil, fmt.Errorf("encoding the response panicked: %v", recover())
		}
	}()
	b, err = encodeResponseOf(rt, resp)
	returned = true
	return b, err
}

func encodeResponseOf[Resp any](rt *Runtime, resp *Resp) ([]byte, error) {
	if _, ok := rt.cfg.codec.(JSONCodec); ok {
		if p := jsonfast.For[Resp](&rt.enc.plans); p != nil {
			je := rt.enc.get()
			je.scratch = jsonfast.Encode(p, je.scratch[:0], resp)
			out := bytes.Clone(je.scratch) // exactly its size, and the store's own
			rt.enc.put(je)
			return out, nil
		}
		return json.Marshal(jsonValue(rt, resp))
	}
	out, err := rt.cfg.codec.Marshal(*resp)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(out), nil // as in encodeRequest
}

// decodeResponse decodes data into *resp with the runtime's codec.
func decodeResponse[Resp any](rt *Runtime, data []byte, resp *Resp) error {
	if _, ok := rt.cfg.codec.(JSONCodec); !ok {
		// data may be the store's own record (memstore keeps one copy), and
		// a Codec may keep slices of what it decodes (one that passes []byte
		// through): it gets a copy, so the caller may change its result.
		return rt.cfg.codec.Unmarshal(bytes.Clone(data), resp)
	}
	// From a fresh value, as json.Unmarshal into a new Resp.
	var zero Resp
	*resp = zero
	if t := reflect.TypeFor[Resp](); interfaceResponse(t) {
		// JSON decodes into an interface (the empty one) as its generic
		// values: maps and float64s where the first caller got the
		// effect's own types. Not the response: not replayable.
		return fmt.Errorf("the response type %v is an interface: JSON cannot tell which type to decode the stored response into", t)
	}
	if p := jsonfast.For[Resp](&rt.enc.plans); p != nil {
		if jsonfast.Decode(p, data, resp) {
			return nil
		}
		*resp = zero // not the canonical encoding: encoding/json decides
	}
	if rt.enc.decode(data, resp) {
		return nil
	}
	// Anything but one well-formed value that decodes cleanly: what
	// json.Unmarshal says about it, from a fresh value.
	*resp = zero
	return json.Unmarshal(bytes.Clone(data), resp) // a copy: see jsonfast's Plan.own
}

// interfaceResponse reports whether t is an interface type, or a pointer
// (to a pointer...) to one: a type the stored JSON does not say how to fill.
// (An interface inside a slice, a map or a struct field holds JSON's generic
// values, as the README says.)
func interfaceResponse(t reflect.Type) bool {
	// At most a few levels: type P *P is a pointer to itself.
	for i := 0; i < 64 && t.Kind() == reflect.Pointer; i++ {
		t = t.Elem()
	}
	return t.Kind() == reflect.Interface
}

type jsonDecoder struct {
	r   bytes.Reader
	dec *json.Decoder
}

// decode decodes data into v (a pointer) with a reused json.Decoder, which
// keeps its buffers from call to call (json.Unmarshal makes new ones); it
// reports whether data was exactly one value that decoded without error,
// as json.Unmarshal would have decoded it.
func (e *encoders) decode(data []byte, v any) bool {
	jd, _ := e.dec.Get().(*jsonDecoder)
	if jd == nil {
		jd = new(jsonDecoder)
		jd.dec = json.NewDecoder(&jd.r)
	}
	jd.r.Reset(data)
	start := jd.dec.InputOffset() // counts from the decoder's first input
	if err := jd.dec.Decode(v); err != nil || jd.dec.InputOffset()-start != int64(len(data)) {
		return false // a decoder that failed, or has input left, is not reused
	}
	if len(data) <= maxPooledEncoder {
		e.dec.Put(jd)
	}
	return true
}
