package idemhttp

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// The runtime's share of BenchmarkMiddlewareFirst and ...Replay: runtime.Do
// with the middleware's request and response types (so the response's
// encoding and decoding are in) on a memory store, an effect that returns
// the benchmark handler's response, and no HTTP. The middleware's own cost
// is BenchmarkMiddleware{First,Replay} less this less BenchmarkMiddlewareBare.
func benchDo(b *testing.B, key func(i int) string) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	rq := request{Method: http.MethodPost, Target: "/charges", BodyLen: 32, BodySHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	effect := func(context.Context, request) (Response, error) {
		return Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"charge":"ch_1"}`)}, nil
	}
	ctx := context.Background()
	do := func(i int) {
		resp, err := runtime.Do(ctx, rt, runtime.Call[request, Response]{Operation: "POST /charges", Key: key(i), Request: rq, Effect: effect})
		if err != nil || resp.Status != http.StatusCreated {
			b.Fatalf("%d: %v, %d", i, err, resp.Status)
		}
	}
	do(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 1; b.Loop(); i++ {
		do(i)
	}
}

func BenchmarkMiddlewareDoOnlyFirst(b *testing.B) {
	buf := []byte("8e03978e-40d5-43e8-bc93-")
	n := len(buf)
	benchDo(b, func(i int) string {
		buf = strconv.AppendInt(buf[:n], 100000000000+int64(i), 10)
		return string(buf)
	})
}

func BenchmarkMiddlewareDoOnlyReplay(b *testing.B) {
	benchDo(b, func(int) string { return "8e03978e-40d5-43e8-bc93-6894a57f9324" })
}
