package idemhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// docs/http.md, the client transport: "the key | the request's own
// Idempotency-Key header; else the context's (WithKey); else a new UUIDv4
// (crypto/rand), once per RoundTrip", and "Anything that retries around the
// Transport calls RoundTrip again, and a request without a key then gets a
// new one per call: ... fix the key first with WithKey or the header".
// A header set by assigning the map (a lower-case name, as HTTP/2 and
// header-forwarding code spell it) is the request's own Idempotency-Key on
// the wire (field names are case-insensitive).
// Review r54, finding 2: the Transport read the key by its canonical name
// only, added a key of its own beside it, and a new one per RoundTrip.
func TestR54TransportOwnHeaderLowerCase(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		var mu sync.Mutex
		var seen [][]string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.Header.Values("Idempotency-Key"))
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
		}))
		defer srv.Close()
		tr := &idemhttp.Transport{}
		for i := 0; i < 2; i++ { // a retry around the Transport, with the key fixed in the header
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader(`{"amount":1}`))
			req.Header["idempotency-key"] = []string{"order-42"}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			res, _ := idemhttp.ResultOf(resp)
			t.Logf("RoundTrip %d: Result.Key %q", i+1, res.Key)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("the server saw Idempotency-Key: %q", seen)
		for _, vs := range seen {
			if len(vs) != 1 || vs[0] != "order-42" {
				t.Fatalf("the server saw Idempotency-Key %q on the requests (want [order-42] each): the Transport added a key of its own beside the request's", seen)
			}
		}
	})
}

// The same request sent twice (a retry around the Transport, the key fixed
// in the header) to idem's own middleware.
func TestR54TransportOwnHeaderLowerCaseIdemServer(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		runs := 0
		h := idemhttp.Middleware(rt)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			runs++
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
		}))
		srv := httptest.NewServer(h)
		defer srv.Close()
		tr := &idemhttp.Transport{}
		var codes []int
		for i := 0; i < 2; i++ {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay", strings.NewReader(`{"amount":1}`))
			req.Header["idempotency-key"] = []string{"order-42"}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
			t.Logf("RoundTrip %d: %d %s", i+1, resp.StatusCode, b)
		}
		mu.Lock()
		defer mu.Unlock()
		if runs != 1 || codes[0] != http.StatusCreated || codes[1] != http.StatusCreated {
			t.Fatalf("two sends of one request with its own key: statuses %v, handler ran %d times", codes, runs)
		}
	})
}
