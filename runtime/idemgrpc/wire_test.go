package idemgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/internal/teststores"
)

// A replay's header metadata is the original's: -bin metadata with bytes
// that are not UTF-8 comes back as the same bytes, not as U+FFFD.
func TestReplayBinaryMetadata(t *testing.T) {
	sig := "\xff\x00\x80sig\xc3"
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			var runs atomic.Int32
			conn := review17Server(t, st.New(t), func(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
				runs.Add(1)
				if err := grpc.SetHeader(ctx, metadata.Pairs("x-sig-bin", sig, "x-nul-bin", "\x00abc=", "x-text", "plain")); err != nil {
					return nil, err
				}
				return structpb.NewStruct(map[string]any{"ok": true})
			})
			key := teststores.Unique()
			var got [2]metadata.MD
			for i := range got {
				ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", key), 10*time.Second)
				in, _ := structpb.NewStruct(map[string]any{"order": "o1"})
				err := conn.Invoke(ctx, method, in, &structpb.Struct{}, grpc.Header(&got[i]))
				cancel()
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			for _, k := range []string{"x-sig-bin", "x-nul-bin", "x-text"} {
				if a, b := got[0].Get(k), got[1].Get(k); len(a) != 1 || len(b) != 1 || a[0] != b[0] {
					t.Fatalf("%s: first %q, replay %q", k, a, b)
				}
			}
			if got[0].Get("x-sig-bin")[0] != sig {
				t.Fatalf("first x-sig-bin %q, want %q", got[0].Get("x-sig-bin")[0], sig)
			}
			if runs.Load() != 1 {
				t.Fatalf("handler ran %d times", runs.Load())
			}
		})
	}
}
