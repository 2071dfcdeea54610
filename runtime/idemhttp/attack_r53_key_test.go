package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestR53KeyWithUnicodeSpaceIsNotBad: README "an empty, repeated or bad
// key 400"; docs/http.md "key: one Idempotency-Key field, as an sf-string
// ... or bare ...; both forms are the same key. It is 1 to 255 bytes of
// visible ASCII." A field whose bytes are not visible ASCII (a UTF-8
// NO-BREAK SPACE, U+00A0, or NEXT LINE, U+0085, before or after the key:
// obs-text, which net/http passes on) must be 400, not taken for the
// visible-ASCII key inside it: two different keys would be one.
func TestR53KeyWithUnicodeSpaceIsNotBad(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Error(err)
			return
		}
		var runs atomic.Int32
		h := idemhttp.Middleware(rt)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "charge %d", n)
		}))
		srv := httptest.NewServer(h)
		defer srv.Close()
		send := func(key string) (int, string, string) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
			req.Header["Idempotency-Key"] = []string{key}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("key %q: %v", key, err)
				return 0, "", ""
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
		}
		if st, _, body := send("k-r53"); st != http.StatusCreated {
			t.Errorf("control: key k-r53: %d %s", st, body)
			return
		}
		for _, key := range []string{"\u00a0k-r53", "k-r53\u0085", "\u3000k-r53"} {
			st, replayed, body := send(key)
			if st != http.StatusBadRequest {
				t.Errorf("key field %q (bytes % x, not visible ASCII): answered %d (Idempotent-Replayed %q) %q, want 400; handler runs so far %d",
					key, []byte(key), st, replayed, body, runs.Load())
			}
		}
		st, _, body := send("\u00a0k-r53-other")
		if st != http.StatusBadRequest {
			t.Errorf("key field %q alone: answered %d %q, want 400 (the handler ran %d times in all)", "\u00a0k-r53-other", st, body, runs.Load())
		}
	})
}
