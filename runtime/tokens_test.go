package runtime

import (
	"strconv"
	"sync"
	"testing"
)

// TestTokensUniqueAcrossBatches: write tokens are owner#counter, counting
// from 1 in base 36, none repeated, across batches and concurrent callers.
func TestTokensUniqueAcrossBatches(t *testing.T) {
	var tk tokens
	const callers, each = 4, 3*tokenBatch + 5
	got := make(chan string, callers*each)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				got <- tk.make("owner-1")
			}
		})
	}
	wg.Wait()
	close(got)
	seen := map[string]bool{}
	for tok := range got {
		if seen[tok] {
			t.Fatalf("token %q handed out twice", tok)
		}
		seen[tok] = true
	}
	for i := 1; i <= callers*each; i++ {
		if want := "owner-1#" + strconv.FormatUint(uint64(i), 36); !seen[want] {
			t.Errorf("token %q not handed out", want)
		}
	}
}
