//go:build !goexperiment.jsonv2

package jsonfast

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/idemkit/idem/internal/benchcmp"
)

// benchResp has the shape of the runtime benchmarks' response.
type benchResp struct {
	ChargeID string `json:"charge_id"`
	Cents    int64  `json:"cents"`
}

// BenchmarkEncodeVsMarshal: Encode against json.Marshal, alternated in
// blocks in one goroutine ("a/floor" above 1: Encode is faster).
func BenchmarkEncodeVsMarshal(b *testing.B) {
	b.ReportAllocs()
	p := Build(reflect.TypeFor[benchResp]())
	v := benchResp{ChargeID: "ch_1", Cents: 100}
	var buf []byte
	benchcmp.Interleaved(b, 1, func(int64) error {
		buf = Encode(p, buf[:0], &v)
		return nil
	}, func(int64) error {
		_, err := json.Marshal(&v)
		return err
	})
}

// BenchmarkDecodeVsDecoder: Decode against a reused json.Decoder (what the
// runtime used before jsonfast), alternated in blocks in one goroutine.
func BenchmarkDecodeVsDecoder(b *testing.B) {
	b.ReportAllocs()
	p := Build(reflect.TypeFor[benchResp]())
	data := []byte(`{"charge_id":"ch_1","cents":100}`)
	var r bytes.Reader
	dec := json.NewDecoder(&r)
	benchcmp.Interleaved(b, 1, func(int64) error {
		var v benchResp
		if !Decode(p, data, &v) {
			return errors.New("not decoded")
		}
		return nil
	}, func(int64) error {
		var v benchResp
		r.Reset(data)
		return dec.Decode(&v)
	})
}
