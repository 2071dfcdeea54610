package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// Review r55. runtime/idemhttp/client.go (Transport doc): "when it is
// cancelled during a wait, RoundTrip returns its error"; docs/http.md,
// client table: "stops ... on cancellation during a wait, with the
// context's error" and "errors are *RequestError ... wrapping the last
// attempt's error or the context's".
//
// Schedule: the server answers 503 with Retry-After: 1; the Transport waits
// to retry; during the wait the caller cancels its context with a cause
// (context.WithCancelCause, cancel(cause)). The context's error is
// context.Canceled; RoundTrip's error must match it (errors.Is), as it does
// for a context cancelled without a cause, and as net/http's own errors do.
func TestR55TransportCancelWithCauseDuringWait(t *testing.T) {
	for _, withCause := range []bool{false, true} {
		name := "cancel"
		if withCause {
			name = "cancel-with-cause"
		}
		t.Run(name, func(t *testing.T) {
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			defer srv.Close()
			cause := errors.New("r55: the user pressed stop")
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			go func() {
				for hits.Load() == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				time.Sleep(200 * time.Millisecond) // inside the 1 s Retry-After wait
				if withCause {
					cancel(cause)
				} else {
					cancel(nil)
				}
			}()
			client := idemhttp.NewClient(&idemhttp.Transport{MaxAttempts: 3})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
			resp, err := client.Do(req)
			if resp != nil {
				resp.Body.Close()
				t.Fatalf("got a response %s, want the context's error", resp.Status)
			}
			t.Logf("err: %v", err)
			if hits.Load() != 1 {
				t.Errorf("%d attempts reached the server, want 1 (cancelled during the first wait)", hits.Load())
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("errors.Is(err, context.Canceled) = false: the error does not carry the context's error (ctx.Err() = %v)", ctx.Err())
			}
		})
	}
}

// Review r55. Transport doc (runtime/idemhttp/client.go): "Never retried:
// ... errors that another attempt cannot fix (a certificate or a host that
// does not exist, a body that cannot be replayed)".
//
// Schedule: a key that net/http refuses to put on the wire (a newline in
// the key given with WithKey: "net/http: invalid header field value"), a
// Transport.Header that is not a valid field name, or a URL without a host
// ("http: no Host in request URL"). Every attempt fails
// the same way before a byte is sent; the Transport must not retry it
// (want 1 attempt), nor sleep through MaxAttempts backoffs.
func TestR55TransportUnfixableHeaderErrorRetried(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name   string
		header string
		key    string
		url    string
	}{
		{"key-with-newline", "", "order-1\nX-Evil: 1", ""},
		{"header-name-with-space", "Idempotency Key", "order-2", ""},
		{"no-host", "", "order-3", "http:///charges"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			var tries atomic.Int32 // what reached net/http: each attempt, sent or refused
			base := r55CountingRT{RoundTripper: http.DefaultTransport, n: &tries}
			tr := &idemhttp.Transport{Header: tc.header, Base: base, MaxAttempts: 4, MinBackoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
			ctx := idemhttp.WithKey(context.Background(), tc.key)
			url := srv.URL
			if tc.url != "" {
				url = tc.url
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
			start := time.Now()
			resp, err := idemhttp.NewClient(tr).Do(req)
			if resp != nil {
				resp.Body.Close()
				t.Fatalf("net/http sent it: %s; want it refused before sending", resp.Status)
			}
			var rerr *idemhttp.RequestError
			if !errors.As(err, &rerr) {
				t.Fatalf("err = %v, want a *RequestError", err)
			}
			t.Logf("err: %v (took %v, %d reached the server)", err, time.Since(start).Round(time.Millisecond), hits.Load())
			// A key that is not visible ASCII is refused before any
			// attempt (review r56: runtime.ValidateKey on the client).
			wantTries := int32(1)
			if runtime.ValidateKey(tc.key) != nil {
				wantTries = 0
				if !errors.Is(err, runtime.ErrInvalidKey) {
					t.Errorf("err = %v, want ErrInvalidKey", err)
				}
			}
			if n := tries.Load(); n != wantTries {
				t.Errorf("%d attempts, want %d: an error no attempt can fix was retried", n, wantTries)
			}
			// RequestError.Attempts: "attempts sent; 0 when the request was
			// refused before" (review r56).
			if rerr.Attempts != 0 {
				t.Errorf("Attempts = %d, want 0: net/http refused the request before sending it", rerr.Attempts)
			}
		})
	}
}

// r55ParseSfString parses a header field as an RFC 8941 Item whose value is
// a String (section 4.2.5), with no parameters: what the draft requires
// ("Idempotency-Key is an Item Structured Header. Its value MUST be a
// String", draft-ietf-httpapi-idempotency-key-header-06, section 2.1).
// RFC 8941 section 4.2: when parsing fails, the whole field is ignored.
func r55ParseSfString(field string) (string, bool) {
	field = strings.Trim(field, " \t")
	if len(field) < 2 || field[0] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(field); i++ {
		switch c := field[i]; {
		case c == '\\':
			i++
			if i == len(field) || (field[i] != '"' && field[i] != '\\') {
				return "", false
			}
			b.WriteByte(field[i])
		case c == '"':
			return b.String(), i == len(field)-1
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}

// Review r55. Transport doc: "Transport is an http.RoundTripper for the
// client side of the Idempotency-Key draft"; README.md: "The client end is
// idemhttp.Transport, an http.RoundTripper for any server that follows the
// draft: one key per logical request ... sent on every attempt";
// docs/http.md: "It works with any server that follows the draft, idem's
// middleware or not."
//
// The draft: "Idempotency-Key is an Item Structured Header [RFC8941]. Its
// value MUST be a String" (section 2.1, example `Idempotency-Key:
// "8e03978e-40d5-43e8-bc93-6894a57f9324"`). The Transport sends the key
// bare (8e03978e-...), which an RFC 8941 parser does not read as a String:
// the field is ignored. Schedule, against a server that parses the field
// as the draft says:
//   - key optional on the route: the first attempt is applied and its
//     reply lost (connection closed); the Transport retries "with the same
//     key", the server sees no valid key and runs the effect again: 2
//     charges for one logical request;
//   - key required: every request is 400 (never retried): the request
//     fails.
//
// Fixed by the Transport's QuotedKey, which such a server needs; the
// default stays bare, as most servers (payment providers among them) read
// the field as a plain token and look charges up by it as written
// (examples/adopt's PSP does): quoting by default broke that lookup. The
// docs now say which servers need which.
func TestR55TransportKeyNotSfString(t *testing.T) {
	for _, required := range []bool{false, true} {
		t.Run(fmt.Sprintf("required=%v", required), func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string][]byte{}
			var charges, hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := hits.Add(1)
				key, ok := r55ParseSfString(r.Header.Get("Idempotency-Key"))
				if !ok && required {
					http.Error(w, "Idempotency-Key must be an sf-string", http.StatusBadRequest)
					return
				}
				if ok {
					mu.Lock()
					if b, done := seen[key]; done {
						mu.Unlock()
						w.Header().Set("Idempotent-Replayed", "true")
						w.WriteHeader(http.StatusCreated)
						_, _ = w.Write(b)
						return
					}
					mu.Unlock()
				}
				body := []byte(fmt.Sprintf(`{"charge":%d}`, charges.Add(1)))
				if ok {
					mu.Lock()
					seen[key] = body
					mu.Unlock()
				}
				if n == 1 { // applied; the reply is lost
					conn, _, err := w.(http.Hijacker).Hijack()
					if err == nil {
						conn.Close()
					}
					return
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(body)
			}))
			defer srv.Close()
			client := idemhttp.NewClient(&idemhttp.Transport{QuotedKey: true, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":4200}`))
			resp, err := client.Do(req)
			status := 0
			if resp != nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			res, _ := idemhttp.ResultOf(resp)
			t.Logf("status %d, err %v, key %q, attempts %d, charges %d", status, err, res.Key, res.Attempts, charges.Load())
			if charges.Load() > 1 {
				t.Errorf("%d charges for one logical request: the server did not read the key the Transport sent", charges.Load())
			}
			if err != nil || status != http.StatusCreated {
				t.Errorf("the request did not succeed: status %d, err %v", status, err)
			}
		})
	}
}

// Review r55. README.md, Errors: ErrInvalidKey is "key empty, over 255
// bytes, or not visible ASCII (0x21-0x7E)"; docs/http.md: the key "is 1 to
// 255 bytes of visible ASCII"; the Transport sends "the context's
// (WithKey)" key "on every attempt" to "any server that follows the draft,
// idem's middleware or not". Schedule: idem's own middleware (memory
// store) behind an httptest server; WithKey with keys of visible ASCII
// holding a double quote or a comma (valid for runtime.ValidateKey). The
// Transport writes the key bare, which the middleware reads as a bad key
// ("a bare key must not contain commas or quotes"): 400 key-invalid, never
// retried, the request refused for a key that is valid. Want 201, and the
// same key's second logical request replayed.
func TestR55TransportKeyWithQuoteThroughMiddleware(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	var charges atomic.Int32
	h := idemhttp.Middleware(rt, idemhttp.Required(true))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, key := range []string{`order"1`, `order,2`, `"order-3`} {
		t.Run(key, func(t *testing.T) {
			if err := runtime.ValidateKey(key); err != nil {
				t.Fatalf("ValidateKey(%q): %v", key, err)
			}
			before := charges.Load()
			client := idemhttp.NewClient(&idemhttp.Transport{MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
			for i := range 2 {
				req, _ := http.NewRequestWithContext(idemhttp.WithKey(context.Background(), key), http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":1}`))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				res, _ := idemhttp.ResultOf(resp)
				t.Logf("request %d: %d %s (replayed %v)", i+1, resp.StatusCode, strings.TrimSpace(string(body)), res.Replayed)
				if want := []int{http.StatusCreated, http.StatusCreated}[i]; resp.StatusCode != want {
					t.Errorf("request %d: status %d, want %d", i+1, resp.StatusCode, want)
				}
			}
			if n := charges.Load() - before; n != 1 {
				t.Errorf("%d charges, want 1", n)
			}
		})
	}
}

// r55CountingRT counts the attempts that reach its RoundTripper.
type r55CountingRT struct {
	http.RoundTripper
	n *atomic.Int32
}

func (c r55CountingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.RoundTripper.RoundTrip(r)
}
