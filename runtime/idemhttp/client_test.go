package idemhttp_test

// The client Transport over real http.Servers: the idemhttp middleware on
// the memory store and PostgreSQL, and a minimal server that follows the
// IETF draft without idem. Faults are injected in front of the server: a
// response lost after the server applied the request (the connection is
// hijacked and closed), a request still running when its connection
// drops, 503 with Retry-After. In every case the effect runs once.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// clFault is what the fault layer does with one request.
type clFault int

const (
	clPass   clFault = iota
	clDrop           // the server applies the request; the connection drops before the reply
	clDetach         // the connection drops at once; the server goes on with the request
	clBusy           // 503 with the Retry-After of the plan, the request not forwarded
	clBadGW          // 502 without Retry-After, the request not forwarded
)

// clBackend is a server under test with a fault layer in front of it and
// the effects it applied, per charge id.
type clBackend struct {
	*httptest.Server
	mu       sync.Mutex
	seen     map[string]int    // requests per key, as they reached the fault layer
	keys     map[string]string // charge id -> key of its requests
	statuses []int             // statuses the fault layer passed on or made
	effects  sync.Map          // charge id -> *atomic.Int32
	bg       sync.WaitGroup
	plan     func(n int) (clFault, string) // the n-th request with a key (1-based)
	delay    time.Duration                 // how long the charge handler takes
}

func (b *clBackend) effectsOf(id string) int32 {
	v, ok := b.effects.Load(id)
	if !ok {
		return 0
	}
	return v.(*atomic.Int32).Load()
}

// charge is the effect: it counts, per charge id, and answers 201.
func (b *clBackend) charge(w http.ResponseWriter, r *http.Request) {
	var in struct{ ID string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.ID == "" {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	switch in.ID {
	case "bad-request":
		http.Error(w, "no such card", http.StatusBadRequest)
		return
	case "unprocessable":
		http.Error(w, "amount over the limit", http.StatusUnprocessableEntity)
		return
	}
	v, _ := b.effects.LoadOrStore(in.ID, new(atomic.Int32))
	n := v.(*atomic.Int32).Add(1)
	if b.delay > 0 {
		// The charge is in flight for delay, and then until a retry has
		// been told so (409): on a loaded machine the client's retry may
		// come later than delay, and the schedule must not depend on it.
		time.Sleep(b.delay)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !b.answered(http.StatusConflict); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"charge":"ch_%s","run":%d}`, in.ID, n)
}

// faults is the layer in front of the server.
func (b *clBackend) faults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := fieldKey(r)
		var in struct{ ID string }
		_ = json.Unmarshal(body, &in)
		b.mu.Lock()
		b.seen[key]++
		n := b.seen[key]
		if in.ID != "" {
			if k, ok := b.keys[in.ID]; ok && k != key {
				b.keys[in.ID] = "several keys: " + k + ", " + key
			} else if !ok {
				b.keys[in.ID] = key
			}
		}
		b.mu.Unlock()
		fault, retryAfter := clPass, ""
		if b.plan != nil {
			fault, retryAfter = b.plan(n)
		}
		r2 := r.Clone(context.WithoutCancel(r.Context()))
		r2.Body = io.NopCloser(bytes.NewReader(body))
		switch fault {
		case clBusy, clBadGW:
			status := http.StatusServiceUnavailable
			if fault == clBadGW {
				status = http.StatusBadGateway
			} else if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			b.record(status)
			w.WriteHeader(status)
			return
		case clDrop:
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r2)
			b.hangUp(w)
			return
		case clDetach:
			b.bg.Add(1)
			go func() {
				defer b.bg.Done()
				next.ServeHTTP(httptest.NewRecorder(), r2)
			}()
			// The connection drops while the request runs: once its
			// charge has started. Hanging up at once let the client's
			// retry reach the middleware first on a loaded machine (a CI
			// run at load 9): the retry ran the charge and the detached
			// request was the one told 409, on a connection already gone.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && b.effectsOf(in.ID) == 0; {
				time.Sleep(time.Millisecond)
			}
			b.hangUp(w)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r2)
		b.record(rec.Code)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// answered reports whether the fault layer has passed on or made a
// response with status.
func (b *clBackend) answered(status int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.statuses, status)
}

func (b *clBackend) record(status int) {
	b.mu.Lock()
	b.statuses = append(b.statuses, status)
	b.mu.Unlock()
}

// hangUp closes the connection without a response.
func (b *clBackend) hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

// clServer builds a backend whose server is made by mk from the charge
// handler.
type clServer struct {
	name string
	mk   func(t *testing.T, charge http.Handler) http.Handler
}

func clServers() []clServer {
	idem := func(store func(testing.TB) runtime.Store) func(t *testing.T, charge http.Handler) http.Handler {
		return func(t *testing.T, charge http.Handler) http.Handler {
			rt, err := runtime.New(store(t), runtime.WithMaxWait(20*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /charges", charge)
			scope := teststores.Unique()
			return idemhttp.Middleware(rt, idemhttp.Required(true), idemhttp.Scope(func(*http.Request) string { return scope }),
				idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux)
		}
	}
	return []clServer{
		{"idemhttp-memory", idem(teststores.Memory)},
		{"idemhttp-postgres", idem(teststores.Postgres)},
		{"draft", func(t *testing.T, charge http.Handler) http.Handler { return newDraftServer(charge) }},
	}
}

func newCLBackend(t *testing.T, srv clServer, plan func(n int) (clFault, string), delay time.Duration) *clBackend {
	t.Helper()
	b := &clBackend{seen: map[string]int{}, keys: map[string]string{}, plan: plan, delay: delay}
	b.Server = httptest.NewServer(b.faults(srv.mk(t, http.HandlerFunc(b.charge))))
	t.Cleanup(func() {
		b.bg.Wait()
		b.Close()
	})
	return b
}

// clPost sends one logical charge through c.
func clPost(ctx context.Context, c *http.Client, url, id string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", strings.NewReader(`{"id":"`+id+`"}`))
	if err != nil {
		return nil, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// fastClient retries quickly.
func fastClient() *http.Client {
	return idemhttp.NewClient(&idemhttp.Transport{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
}

func nth(faults ...clFault) func(n int) (clFault, string) {
	return func(n int) (clFault, string) {
		if n <= len(faults) {
			return faults[n-1], "1"
		}
		return clPass, ""
	}
}

func TestClientRetries(t *testing.T) {
	tests := []struct {
		name         string
		plan         func(n int) (clFault, string)
		delay        time.Duration
		wantAttempts int
		wantSeen     int // requests that reached the server, when not wantAttempts
		wantReplayed bool
		wantStatuses []int // statuses the server side answered, in order (the fault layer's view)
		minElapsed   time.Duration
	}{
		{name: "no fault", wantAttempts: 1, wantStatuses: []int{201}},
		// The server applied the request and recorded it; the reply is
		// lost. The retry, same key and body, gets the recorded response.
		{name: "lost response", plan: nth(clDrop), wantAttempts: 2, wantReplayed: true, wantStatuses: []int{201}},
		{name: "two lost responses", plan: nth(clDrop, clDrop), wantAttempts: 3, wantReplayed: true, wantStatuses: []int{201}},
		// The connection drops while the request runs: the retry finds it
		// in flight (409, Retry-After: 1), waits, and gets the replay.
		{name: "409 in flight then replay", plan: nth(clDetach), delay: 300 * time.Millisecond, wantAttempts: 3, wantReplayed: true,
			wantStatuses: []int{409, 201}, minElapsed: time.Second},
		{name: "503 Retry-After seconds", plan: func(n int) (clFault, string) {
			if n == 1 {
				return clBusy, "1"
			}
			return clPass, ""
		}, wantAttempts: 2, wantStatuses: []int{503, 201}, minElapsed: time.Second},
		{name: "503 Retry-After HTTP-date", plan: func(n int) (clFault, string) {
			if n == 1 {
				return clBusy, time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat)
			}
			return clPass, ""
		}, wantAttempts: 2, wantStatuses: []int{503, 201}, minElapsed: time.Second},
		// After the 502 the connection is reused; when it drops before
		// any byte of the reply, net/http itself resends the request (it
		// carries an Idempotency-Key, so net/http deems it replayable):
		// the same key, one attempt of the Transport's, three requests.
		{name: "502 then lost on a reused connection", plan: nth(clBadGW, clDrop), wantAttempts: 2, wantSeen: 3, wantReplayed: true, wantStatuses: []int{502, 201}},
	}
	for _, srv := range clServers() {
		t.Run(srv.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					b := newCLBackend(t, srv, tt.plan, tt.delay)
					id := teststores.Unique()
					start := time.Now()
					resp, body, err := clPost(context.Background(), fastClient(), b.URL, id)
					if err != nil {
						t.Fatal(err)
					}
					elapsed := time.Since(start)
					res, ok := idemhttp.ResultOf(resp)
					if !ok {
						t.Fatal("no Result on the response")
					}
					if resp.StatusCode != http.StatusCreated || !strings.Contains(body, `"charge":"ch_`+id+`","run":1`) {
						t.Fatalf("got %d %s; want 201 with run 1", resp.StatusCode, body)
					}
					if res.Attempts != tt.wantAttempts || res.Replayed != tt.wantReplayed || res.Key == "" {
						t.Errorf("result %+v; want %d attempts, replayed %v, a key", res, tt.wantAttempts, tt.wantReplayed)
					}
					if n := b.effectsOf(id); n != 1 {
						t.Errorf("the charge ran %d times; want 1", n)
					}
					b.mu.Lock()
					defer b.mu.Unlock()
					if k := b.keys[id]; k != res.Key {
						t.Errorf("the server saw key %q; the client reports %q", k, res.Key)
					}
					if want := max(tt.wantSeen, tt.wantAttempts); b.seen[res.Key] != want {
						t.Errorf("the server saw %d requests with the key; want %d", b.seen[res.Key], want)
					}
					if fmt.Sprint(b.statuses) != fmt.Sprint(tt.wantStatuses) {
						t.Errorf("server-side statuses %v; want %v", b.statuses, tt.wantStatuses)
					}
					if elapsed < tt.minElapsed {
						t.Errorf("took %v; Retry-After asked for at least %v", elapsed, tt.minElapsed)
					}
				})
			}
		})
	}
}

// 400 and 422 are the client's bug and a replayed answer is final: none is
// retried, on any server.
func TestClientDoesNotRetry(t *testing.T) {
	for _, srv := range clServers() {
		t.Run(srv.name, func(t *testing.T) {
			b := newCLBackend(t, srv, nil, 0)
			c := fastClient()
			for _, tt := range []struct {
				id     string
				status int
			}{{"bad-request", 400}, {"unprocessable", 422}} {
				resp, _, err := clPost(context.Background(), c, b.URL, tt.id)
				if err != nil {
					t.Fatal(err)
				}
				res, _ := idemhttp.ResultOf(resp)
				if resp.StatusCode != tt.status || res.Attempts != 1 {
					t.Errorf("%s: %d after %d attempts; want %d after 1", tt.id, resp.StatusCode, res.Attempts, tt.status)
				}
			}
			// The same key with another body: 422 from the server, not retried.
			ctx := idemhttp.WithKey(context.Background(), "reused-"+teststores.Unique())
			if resp, _, err := clPost(ctx, c, b.URL, "first-"+teststores.Unique()); err != nil || resp.StatusCode != 201 {
				t.Fatalf("first: %v %v", resp, err)
			}
			resp, _, err := clPost(ctx, c, b.URL, "other-"+teststores.Unique())
			if err != nil {
				t.Fatal(err)
			}
			if res, _ := idemhttp.ResultOf(resp); resp.StatusCode != 422 || res.Attempts != 1 {
				t.Errorf("key reused: %d after %d attempts; want 422 after 1", resp.StatusCode, res.Attempts)
			}
		})
	}
}

// A replayed 409 (the server recorded a business conflict) is final.
func TestClientReplayedConflictIsFinal(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set(idemhttp.ReplayedHeader, "true")
		w.WriteHeader(http.StatusConflict)
	}))
	defer srv.Close()
	resp, _, err := clPost(context.Background(), fastClient(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := idemhttp.ResultOf(resp); resp.StatusCode != 409 || !res.Replayed || res.Attempts != 1 || hits.Load() != 1 {
		t.Fatalf("%d %+v, %d hits; want one replayed 409", resp.StatusCode, res, hits.Load())
	}
}

// The request's deadline ends the retries: when the next attempt would
// start after it, the last answer comes back at once; a cancellation
// during a wait returns the context's error. A later logical retry with
// the same key (persisted by the caller) replays: the effect ran once.
func TestClientDeadlineBetweenRetries(t *testing.T) {
	for _, srv := range clServers() {
		t.Run(srv.name, func(t *testing.T) {
			t.Run("deadline before the next attempt", func(t *testing.T) {
				// Applied and lost, then 503 Retry-After: 5 with 1.5s left.
				b := newCLBackend(t, srv, func(n int) (clFault, string) {
					switch n {
					case 1:
						return clDrop, ""
					case 2:
						return clBusy, "5"
					}
					return clPass, ""
				}, 0)
				ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
				defer cancel()
				id := teststores.Unique()
				start := time.Now()
				resp, _, err := clPost(ctx, fastClient(), b.URL, id)
				if err != nil {
					t.Fatal(err)
				}
				res, _ := idemhttp.ResultOf(resp)
				if resp.StatusCode != 503 || res.Attempts != 2 || time.Since(start) > time.Second {
					t.Fatalf("%d after %d attempts in %v; want the 503 after 2, at once", resp.StatusCode, res.Attempts, time.Since(start))
				}
				again, body, err := clPost(idemhttp.WithKey(context.Background(), res.Key), fastClient(), b.URL, id)
				if err != nil {
					t.Fatal(err)
				}
				if r2, _ := idemhttp.ResultOf(again); again.StatusCode != 201 || !r2.Replayed || !strings.Contains(body, `"run":1`) {
					t.Fatalf("the later retry: %d %s %+v; want the replay of run 1", again.StatusCode, body, r2)
				}
				if n := b.effectsOf(id); n != 1 {
					t.Fatalf("the charge ran %d times; want 1", n)
				}
			})
			t.Run("cancelled while waiting", func(t *testing.T) {
				b := newCLBackend(t, srv, func(n int) (clFault, string) {
					if n == 1 {
						return clDrop, ""
					}
					return clBusy, "3"
				}, 0)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				time.AfterFunc(400*time.Millisecond, cancel)
				id := teststores.Unique()
				_, _, err := clPost(ctx, fastClient(), b.URL, id)
				var re *idemhttp.RequestError
				if !errors.Is(err, context.Canceled) || !errors.As(err, &re) || re.Attempts != 2 || re.Key == "" {
					t.Fatalf("err %v; want context.Canceled after 2 attempts", err)
				}
				if n := b.effectsOf(id); n != 1 {
					t.Fatalf("the charge ran %d times; want 1", n)
				}
			})
		})
	}
}

// oneShot is a body that can be read once, with no GetBody.
type oneShot struct{ io.Reader }

func (oneShot) Close() error { return nil }

func TestClientBody(t *testing.T) {
	for _, srv := range clServers() {
		t.Run(srv.name, func(t *testing.T) {
			b := newCLBackend(t, srv, nth(clDrop), 0)
			c := idemhttp.NewClient(&idemhttp.Transport{MinBackoff: 10 * time.Millisecond, MaxBufferedBody: 64})
			// Under the buffer: the body is buffered and sent again.
			id := teststores.Unique()
			req, _ := http.NewRequest(http.MethodPost, b.URL+"/charges", oneShot{strings.NewReader(`{"id":"` + id + `"}`)})
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if res, _ := idemhttp.ResultOf(resp); resp.StatusCode != 201 || res.Attempts != 2 || !res.Replayed || b.effectsOf(id) != 1 {
				t.Fatalf("%d %+v, %d effects; want a replay after 2 attempts, 1 effect", resp.StatusCode, res, b.effectsOf(id))
			}
			// Over it: refused before anything is sent.
			big := `{"id":"` + id + `-big","pad":"` + strings.Repeat("p", 100) + `"}`
			req, _ = http.NewRequest(http.MethodPost, b.URL+"/charges", oneShot{strings.NewReader(big)})
			_, err = c.Do(req)
			var re *idemhttp.RequestError
			if !errors.Is(err, idemhttp.ErrBodyNotReplayable) || !errors.As(err, &re) || re.Attempts != 0 {
				t.Fatalf("err %v; want ErrBodyNotReplayable before any attempt", err)
			}
			// The same body with GetBody: no buffer needed.
			req, _ = http.NewRequest(http.MethodPost, b.URL+"/charges", strings.NewReader(big))
			resp, err = c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if res, _ := idemhttp.ResultOf(resp); resp.StatusCode != 201 || res.Attempts != 2 || b.effectsOf(id+"-big") != 1 {
				t.Fatalf("with GetBody: %d %+v, %d effects", resp.StatusCode, res, b.effectsOf(id+"-big"))
			}
		})
	}
}

// Concurrent logical requests get distinct keys, each kept on its retries.
func TestClientConcurrentKeys(t *testing.T) {
	for _, srv := range clServers() {
		t.Run(srv.name, func(t *testing.T) {
			b := newCLBackend(t, srv, nth(clDrop), 0)
			c := fastClient()
			const n = 32
			ids := make([]string, n)
			results := make([]idemhttp.Result, n)
			var wg sync.WaitGroup
			for i := range n {
				ids[i] = fmt.Sprintf("%s-%d", teststores.Unique(), i)
				wg.Go(func() {
					resp, _, err := clPost(context.Background(), c, b.URL, ids[i])
					if err != nil {
						t.Error(err)
						return
					}
					results[i], _ = idemhttp.ResultOf(resp)
				})
			}
			wg.Wait()
			seen := map[string]bool{}
			b.mu.Lock()
			defer b.mu.Unlock()
			for i, res := range results {
				if seen[res.Key] || res.Key == "" {
					t.Errorf("request %d: key %q repeated or empty", i, res.Key)
				}
				seen[res.Key] = true
				// Attempts is 2, or 1 when net/http's own Transport resent the
				// request on a reused connection that dropped (it resends a
				// request that carries an Idempotency-Key): either way one key,
				// one charge, and the answer a replay.
				if b.keys[ids[i]] != res.Key || res.Attempts < 1 || res.Attempts > 2 || !res.Replayed {
					t.Errorf("request %d: the server saw %q, the client %+v", i, b.keys[ids[i]], res)
				}
				if e := b.effectsOf(ids[i]); e != 1 {
					t.Errorf("request %d: the charge ran %d times", i, e)
				}
			}
		})
	}
}

// The caller's key, from the header or the context, is the one sent; safe
// methods get none and are retried.
func TestClientKeySources(t *testing.T) {
	var mu sync.Mutex
	var got []string
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+strings.Join(r.Header.Values("Idempotency-Key"), ","))
		mu.Unlock()
		if hits.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // every first attempt
		}
	}))
	defer srv.Close()
	c := fastClient()
	send := func(ctx context.Context, method, header string) {
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL, nil)
		if header != "" {
			req.Header.Set("Idempotency-Key", header)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if res, _ := idemhttp.ResultOf(resp); resp.StatusCode != 200 || res.Attempts != 2 {
			t.Fatalf("%s: %d %+v", method, resp.StatusCode, res)
		}
	}
	send(context.Background(), http.MethodPost, "from-header")
	send(idemhttp.WithKey(context.Background(), "from-context"), http.MethodPatch, "")
	send(idemhttp.WithKey(context.Background(), "from-context"), http.MethodPut, "header-wins")
	send(context.Background(), http.MethodGet, "")
	want := "[POST from-header POST from-header PATCH from-context PATCH from-context PUT header-wins PUT header-wins GET  GET ]"
	if fmt.Sprint(got) != want {
		t.Fatalf("server saw %v;\nwant %s", got, want)
	}
}

// A per-attempt timeout is retried; the request's deadline is not.
func TestClientAttemptTimeout(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	c := idemhttp.NewClient(&idemhttp.Transport{AttemptTimeout: 200 * time.Millisecond, MinBackoff: 10 * time.Millisecond})
	resp, body, err := clPost(context.Background(), c, srv.URL, "t")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := idemhttp.ResultOf(resp); body != "ok" || res.Attempts != 2 {
		t.Fatalf("%q %+v; want ok after 2 attempts", body, res)
	}
}

// Connection errors are retried up to MaxAttempts; an address that refuses
// every connection ends with a RequestError naming the attempts.
func TestClientConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := idemhttp.NewClient(&idemhttp.Transport{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	_, _, err := clPost(context.Background(), c, url, "x")
	var re *idemhttp.RequestError
	if !errors.As(err, &re) || re.Attempts != 3 || re.Key == "" {
		t.Fatalf("err %v; want a RequestError after 3 attempts", err)
	}
}

func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		k := idemhttp.NewKey()
		if len(k) != 36 || k[14] != '4' || !strings.ContainsRune("89ab", rune(k[19])) || seen[k] {
			t.Fatalf("bad or repeated UUIDv4 %q", k)
		}
		seen[k] = true
	}
}

// draftServer is a minimal server following the Idempotency-Key draft,
// without idem: a key's first request runs, duplicates in flight get 409,
// a key with another body 422, a finished one its response replayed.
type draftServer struct {
	next    http.Handler
	mu      sync.Mutex
	records map[string]*draftRecord
}

type draftRecord struct {
	body   string
	done   bool
	status int
	header http.Header
	resp   []byte
}

func newDraftServer(next http.Handler) *draftServer {
	return &draftServer{next: next, records: map[string]*draftRecord{}}
}

func (s *draftServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := fieldKey(r)
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	rec, ok := s.records[key]
	switch {
	case ok && rec.body != string(body):
		s.mu.Unlock()
		http.Error(w, "key reused", http.StatusUnprocessableEntity)
		return
	case ok && !rec.done:
		s.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "in flight", http.StatusConflict)
		return
	case ok:
		s.mu.Unlock()
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.resp)
		return
	}
	rec = &draftRecord{body: string(body)}
	s.records[key] = rec
	s.mu.Unlock()
	rw := httptest.NewRecorder()
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.next.ServeHTTP(rw, r)
	s.mu.Lock()
	if rw.Code >= 500 {
		delete(s.records, key)
	} else {
		rec.done, rec.status, rec.header, rec.resp = true, rw.Code, rw.Header().Clone(), rw.Body.Bytes()
	}
	s.mu.Unlock()
	for k, v := range rw.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rw.Code)
	_, _ = w.Write(rw.Body.Bytes())
}

type closeCounter struct {
	http.RoundTripper
	closed atomic.Int32
}

func (c *closeCounter) CloseIdleConnections() { c.closed.Add(1) }

// http.Client.CloseIdleConnections reaches the base transport.
func TestClientCloseIdleConnections(t *testing.T) {
	base := &closeCounter{RoundTripper: http.DefaultTransport}
	idemhttp.NewClient(&idemhttp.Transport{Base: base}).CloseIdleConnections()
	if base.closed.Load() != 1 {
		t.Fatal("CloseIdleConnections did not reach the base transport")
	}
}

// fieldKey is the key of r's Idempotency-Key field read as the draft's
// Structured Field String (RFC 8941 section 3.3.3: quoted, with \" and
// \\ escaped), or a bare field as it is (idem's middleware reads both).
func fieldKey(r *http.Request) string {
	v := r.Header.Get("Idempotency-Key")
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return v
	}
	var b strings.Builder
	for i := 1; i < len(v)-1; i++ {
		if v[i] == '\\' && i+1 < len(v)-1 {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// closeTracker records whether a request body was closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

// TestTransportRefusesInvalidKey: a key of WithKey's or NewKey's that the
// middleware would refuse, or read as another (net/http sends " k1" as it
// is; the server's reader trims it to k1), is refused before anything is
// sent, with the request's body closed (review r56).
func TestTransportRefusesInvalidKey(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	for _, tt := range []struct {
		name   string
		key    string
		newKey bool
	}{
		{"leading space", " k1", false},
		{"inner space", "k 1", false},
		{"non-ASCII", "clé", false},
		{"too long", strings.Repeat("k", runtime.MaxKeyLen+1), false},
		{"NewKey's", "k\t1", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := &idemhttp.Transport{}
			ctx := context.Background()
			if tt.newKey {
				tr.NewKey = func() string { return tt.key }
			} else {
				ctx = idemhttp.WithKey(ctx, tt.key)
			}
			body := &closeTracker{Reader: strings.NewReader("{}")}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tr.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
				t.Fatalf("sent: %s", resp.Status)
			}
			var rerr *idemhttp.RequestError
			if !errors.As(err, &rerr) || !errors.Is(err, runtime.ErrInvalidKey) || rerr.Attempts != 0 || rerr.Key != tt.key {
				t.Fatalf("err = %#v (%v), want a *RequestError for the key, 0 attempts, wrapping ErrInvalidKey", rerr, err)
			}
			if !body.closed.Load() {
				t.Error("the request's body was not closed")
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
	// A valid key with the characters the middleware wants quoted is sent.
	tr := &idemhttp.Transport{}
	req, _ := http.NewRequestWithContext(idemhttp.WithKey(context.Background(), `a,"b\`), http.MethodPost, srv.URL, strings.NewReader("{}"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}
