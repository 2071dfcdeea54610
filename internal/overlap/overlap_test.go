package overlap

import (
	"context"
	"testing"
	"time"
)

func TestEffects(t *testing.T) {
	tests := []struct {
		name         string
		cancelFirst  bool // the first effect is told to stop before the second starts
		wantOverlaps int
	}{
		{"a second effect beside a live one", false, 1},
		{"a second effect beside one told to stop", true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var e Effects
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			started, done := make(chan struct{}), make(chan error, 1)
			go func() {
				close(started)
				done <- e.Run(ctx, time.Hour)
			}()
			<-started
			for {
				if ran, _ := e.Counts(); ran == 1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if tc.cancelFirst {
				cancel()
			}
			if err := e.Run(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := <-done; err == nil {
				t.Fatal("the first effect ended on its own, want its context's cause")
			}
			if ran, overlaps := e.Counts(); ran != 2 || overlaps != tc.wantOverlaps {
				t.Fatalf("ran %d, overlaps %d; want 2, %d", ran, overlaps, tc.wantOverlaps)
			}
		})
	}
}
