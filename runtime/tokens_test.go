package runtime

import (
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestTokensUniqueAcrossBatches: write tokens are owner#random.counter,
// counting from 1 in base 36, none repeated, across batches and concurrent
// callers.
func TestTokensUniqueAcrossBatches(t *testing.T) {
	tk := newTokens("owner-1")
	const callers, each = 4, 3*tokenBatch + 5
	got := make(chan string, callers*each)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				got <- tk.make()
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
		if want := tk.prefix + strconv.FormatUint(uint64(i), 36); !seen[want] {
			t.Errorf("token %q not handed out", want)
		}
	}
}

// TestTokensUniquePerRuntime: two runtimes given one owner id (runtimes of
// one process, or a process restarted under its pod's name) never make the
// same token (review r52: a store took a failed CAS for the write of the
// other runtime that carried the same owner#counter).
func TestTokensUniquePerRuntime(t *testing.T) {
	a, b := newTokens("pod-a"), newTokens("pod-a")
	seen := map[string]bool{}
	for range 3 * tokenBatch {
		for _, tk := range []*tokens{a, b} {
			tok := tk.make()
			if seen[tok] {
				t.Fatalf("token %q made by two runtimes of owner pod-a", tok)
			}
			if !strings.HasPrefix(tok, "pod-a#") {
				t.Fatalf("token %q does not start with its owner id", tok)
			}
			seen[tok] = true
		}
	}
}
