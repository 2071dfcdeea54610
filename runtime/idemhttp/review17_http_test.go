package idemhttp_test

// Adversarial review of issue 17: idemhttp now records request and
// response bodies in pooled buffers, shares the handler's header map with
// the record, and reads stored responses in one pass. These attacks run
// real http.Servers.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// Promise: each request's client, and each of its replays, gets the response
// its own handler wrote from its own body, however many requests share the
// pooled buffers at once. Schedule: 6 clients x 10 keys, bodies of sizes
// around the pool's 512-byte start and 64 KiB limit, half of them sent
// chunked (no Content-Length), every key sent twice at once and once more
// after; the handler echoes a digest and the tail of its body, with a
// header derived from the body.
func TestReview17PooledBuffersConcurrent(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t), runtime.WithMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			mux := http.NewServeMux()
			mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				b, err := io.ReadAll(r.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				w.Header().Set("X-Len", fmt.Sprint(len(b)))
				w.Header().Set("X-Head", string(b[:min(len(b), 16)]))
				w.WriteHeader(http.StatusCreated)
				// Written in pieces, so the buffer grows while it is written.
				for len(b) > 0 {
					n := min(len(b), 700)
					_, _ = w.Write(b[:n])
					b = b[n:]
				}
			})
			srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux))
			defer srv.Close()
			tenant := teststores.Unique()
			sizes := []int{0, 1, 511, 512, 513, 4096, 65535, 65536, 65537, 200 << 10}
			send := func(key, body string, chunked bool) (int, string, http.Header, error) {
				var rd io.Reader = strings.NewReader(body)
				if chunked {
					rd = io.MultiReader(strings.NewReader(body)) // hides the length: chunked
				}
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/echo", rd)
				req.Header.Set("Idempotency-Key", key)
				resp, err := srv.Client().Do(req)
				if err != nil {
					return 0, "", nil, err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), resp.Header, err
			}
			var wg sync.WaitGroup
			errs := make(chan error, 1000)
			const clients, keys = 6, 10
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range keys {
						key := fmt.Sprintf("%s-c%d-k%d", tenant, c, k)
						size := sizes[(c+k)%len(sizes)]
						body := strings.Repeat(fmt.Sprintf("<%s>", key), size/len(key)+1)[:size]
						chunked := k%2 == 0
						var inner sync.WaitGroup
						for range 2 {
							inner.Add(1)
							go func() {
								defer inner.Done()
								for try := 0; ; try++ {
									status, got, h, err := send(key, body, chunked)
									if err == nil && status == http.StatusConflict && try < 50 {
										time.Sleep(20 * time.Millisecond)
										continue
									}
									if err != nil || status != http.StatusCreated || got != body || h.Get("X-Len") != fmt.Sprint(size) || h.Get("X-Head") != body[:min(size, 16)] {
										errs <- fmt.Errorf("%s (%d bytes): %d, %v, body %d bytes equal=%v, X-Len %q X-Head %q",
											key, size, status, err, len(got), got == body, h.Get("X-Len"), h.Get("X-Head"))
									}
									return
								}
							}()
						}
						inner.Wait()
						status, got, h, err := send(key, body, !chunked)
						if err != nil || status != http.StatusCreated || got != body || h.Get("Idempotent-Replayed") != "true" {
							errs <- fmt.Errorf("%s replay: %d, %v, equal=%v, replayed %q", key, status, err, got == body, h.Get("Idempotent-Replayed"))
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			n := 0
			for err := range errs {
				if n++; n <= 10 {
					t.Error(err)
				}
			}
			if r := runs.Load(); r != clients*keys {
				t.Errorf("handlers ran %d times for %d keys", r, clients*keys)
			}
		})
	}
}

// hookStore runs beforeTransition before every Transition.
type hookStore struct {
	runtime.Store
	beforeTransition func()
}

func (s hookStore) Transition(ctx context.Context, p runtime.TransitionParams) (int64, error) {
	if s.beforeTransition != nil {
		s.beforeTransition()
	}
	return s.Store.Transition(ctx, p)
}

// Promise (docs, writer.go): "a handler that writes after it returned (which
// net/http forbids) gets errReleased", and the first client gets what was
// recorded, so that its duplicates get the same answer. Schedule: the
// handler leaves a goroutine that writes once the handler has returned; the
// write lands while the outcome is being recorded (the store's Transition
// waits for it), i.e. after the record's body was taken and before the
// client's writer got it.
func TestReview17LateWriteWhileRecording(t *testing.T) {
	late := make(chan chan error, 1)
	store := hookStore{Store: teststores.Memory(t)}
	store.beforeTransition = func() {
		select {
		case res := <-late:
			res <- nil // lets the late write go
			<-res      // and waits for it to be done
		default:
		}
	}
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	var lateErr error
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		res := make(chan error)
		late <- res
		go func() {
			<-res
			_, lateErr = w.Write([]byte(" LATE"))
			res <- nil
		}()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	})
	srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux))
	defer srv.Close()
	first := reviewPost(t, srv.URL+"/charges", "", "k1", "{}")
	dup := reviewPost(t, srv.URL+"/charges", "", "k1", "{}")
	if lateErr == nil {
		t.Errorf("a write after the handler returned succeeded; the writer's doc promises errReleased")
	}
	if first.body != dup.body {
		t.Errorf("the first client got %q, its duplicate %q: the first answer is not what was recorded", first.body, dup.body)
	}
}

// Promise: a stored response replays byte for byte, headers included,
// whatever its header names and values (escapes, non-ASCII, names in two
// cases, empty lists, many values), through the one-pass reader and the
// general one alike. Schedule: handlers set such headers through the map
// directly; the first answer and two replays are compared.
func TestReview17HeaderFormsReplay(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			rt, err := runtime.New(st.New(t))
			if err != nil {
				t.Fatal(err)
			}
			cases := []map[string][]string{
				{"X-A": {"1", "2", "3"}},
				{"X-Html": {"<b>&amp;</b>"}},
				{"X-Quote": {`say "hi" \ there`}},
				{"X-Utf8": {"café ✓"}},
				{"x-lower": {"v"}},
				{"X-Empty": {""}},
				{"X-Many": strings.Split(strings.Repeat("v,", 100), ",")},
				{"Content-Type": {"application/json"}, "Location": {"/charges/1"}, "X-A": {"a"}},
			}
			mux := http.NewServeMux()
			var which atomic.Int32
			mux.HandleFunc("POST /h", func(w http.ResponseWriter, r *http.Request) {
				for k, vs := range cases[which.Load()] {
					w.Header()[k] = vs
				}
				w.WriteHeader(http.StatusAccepted)
				_, _ = io.WriteString(w, "ok")
			})
			srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux))
			defer srv.Close()
			tenant := teststores.Unique()
			get := func(key string) (*http.Response, string) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/h", strings.NewReader("{}"))
				req.Header.Set("Idempotency-Key", tenant+key)
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, string(b)
			}
			for i, h := range cases {
				which.Store(int32(i))
				key := fmt.Sprintf("h%d", i)
				first, fb := get(key)
				for r := range 2 {
					dup, db := get(key)
					if dup.StatusCode != first.StatusCode || db != fb || dup.Header.Get("Idempotent-Replayed") != "true" {
						t.Fatalf("case %d replay %d: %d %q, first %d %q", i, r, dup.StatusCode, db, first.StatusCode, fb)
					}
					for k := range h {
						if got, want := dup.Header.Values(k), first.Header.Values(k); strings.Join(got, "\x00") != strings.Join(want, "\x00") {
							t.Errorf("case %d replay %d: header %q = %q, first answer had %q", i, r, k, got, want)
						}
					}
				}
			}
		})
	}
}

// Promise (writer.go): "a handler that keeps its writer ... past its
// return gets errors, never another request's bytes". Schedule: the
// handler streams (it flushes, so its response is passed through), keeps
// its writer, and writes again once the client has the whole response,
// i.e. after ServeHTTP returned: net/http has by then recycled the
// connection's buffered writer, which the next response on any connection
// may be using.
func TestReview17LateWriteAfterStreaming(t *testing.T) {
	rt, err := runtime.New(teststores.Memory(t))
	if err != nil {
		t.Fatal(err)
	}
	kept := make(chan http.ResponseWriter, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "part 1")
		http.NewResponseController(w).Flush()
		kept <- w
	})
	srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux))
	defer srv.Close()
	first := reviewPost(t, srv.URL+"/stream", "", "k1", "{}")
	if first.body != "part 1" {
		t.Fatalf("first: %+v", first)
	}
	w := <-kept
	time.Sleep(50 * time.Millisecond) // ServeHTTP has returned
	if n, err := w.Write([]byte("LATE")); err == nil {
		t.Errorf("a write after the streamed handler returned (and after ServeHTTP returned) succeeded (%d bytes): it went to net/http's recycled writer, not to errReleased", n)
	}
}

// The consequence of the above: the late write lands in the next response
// that took net/http's recycled writer, and that response's client gets
// another request's bytes. Schedule: a streamed handler keeps its writer;
// once its client has the response, a second request (another key, another
// connection) blocks in its handler while the first handler's writer
// writes "LEAK"; the second client's body is checked. Tried a few times
// (the recycled writer is pooled).
func TestReview17LateStreamWriteReachesAnotherClient(t *testing.T) {
	rt, err := runtime.New(teststores.Memory(t))
	if err != nil {
		t.Fatal(err)
	}
	kept := make(chan http.ResponseWriter, 1)
	proceed := make(chan chan struct{}, 1)
	inSecond := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "part 1")
		http.NewResponseController(w).Flush()
		kept <- w
	})
	mux.HandleFunc("POST /other", func(w http.ResponseWriter, r *http.Request) {
		goOn := <-proceed
		inSecond <- struct{}{}
		<-goOn
		_, _ = io.WriteString(w, "second's own body")
	})
	srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux))
	defer srv.Close()
	for try := range 20 {
		first := reviewPost(t, srv.URL+"/stream", "", fmt.Sprint("s", try), "{}")
		if first.body != "part 1" {
			t.Fatalf("first: %+v", first)
		}
		w := <-kept
		srv.CloseClientConnections()
		goOn := make(chan struct{})
		proceed <- goOn
		done := make(chan reviewAnswer, 1)
		go func() { done <- reviewPost(t, srv.URL+"/other", "", fmt.Sprint("o", try), "{}") }()
		<-inSecond
		_, _ = w.Write([]byte("LEAK"))
		close(goOn)
		second := <-done
		if strings.Contains(second.body, "LEAK") {
			t.Fatalf("try %d: the second client got %q: bytes of another request's handler", try, second.body)
		}
	}
}

// Promise: the first client gets what was recorded (its duplicates get the
// same answer), including a handler that keeps its writer past its return
// (the fix of TestReview17LateWriteWhileRecording stops late writes of the
// body). Schedule: as there, but the late goroutine sets a header through
// the kept writer (w.Header().Set) while the outcome is recorded. (A
// handler that keeps the map itself and changes it after returning races
// with the record as it would with net/http, which forbids it: docs/http.md.)
func TestReview17LateHeaderWhileRecording(t *testing.T) {
	late := make(chan chan error, 1)
	store := hookStore{Store: teststores.Memory(t)}
	store.beforeTransition = func() {
		select {
		case res := <-late:
			res <- nil
			<-res
		default:
		}
	}
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		res := make(chan error)
		late <- res
		go func() {
			<-res
			w.Header().Set("X-Late", "1")
			res <- nil
		}()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	})
	srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux))
	defer srv.Close()
	get := func() http.Header {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.ReadAll(resp.Body)
		return resp.Header
	}
	first, dup := get(), get()
	if first.Get("X-Late") != dup.Get("X-Late") {
		t.Errorf("the first client got X-Late %q, its duplicate %q: the first answer is not what was recorded", first.Get("X-Late"), dup.Get("X-Late"))
	}
}

// Promise: MaxBody bounds the body read for the fingerprint: a body of
// exactly the limit is accepted and fingerprinted whole, one byte more is
// 413 and never reaches the handler, whether or not the client declares
// the length (the body is now read into a pooled buffer sized from
// Content-Length, up to 64 KiB ahead). Schedule: limits around the
// 512-byte pool start and the 64 KiB read-ahead, bodies of limit-1, limit
// and limit+1 bytes, sent with and without Content-Length; the same key
// then resent with the last byte changed must be 422 (the whole body is
// fingerprinted).
func TestReview17MaxBodyBoundary(t *testing.T) {
	for _, limit := range []int{1, 511, 512, 513, 65535, 65536, 65537, 100000} {
		rt, err := runtime.New(teststores.Memory(t))
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		mux := http.NewServeMux()
		mux.HandleFunc("POST /up", func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%d", len(b))
		})
		srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.MaxBody(int64(limit)), idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux))
		for _, n := range []int{limit - 1, limit, limit + 1} {
			for _, declared := range []bool{true, false} {
				body := strings.Repeat("a", n)
				send := func(b string) (int, string) {
					var rd io.Reader = strings.NewReader(b)
					if !declared {
						rd = io.MultiReader(rd)
					}
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/up", rd)
					req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d-%v", n, declared))
					resp, err := srv.Client().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					got, _ := io.ReadAll(resp.Body)
					return resp.StatusCode, string(got)
				}
				before := runs.Load()
				status, got := send(body)
				switch {
				case n > limit && (status != http.StatusRequestEntityTooLarge || runs.Load() != before):
					t.Errorf("limit %d, %d bytes (declared %v): %d %q, handler ran %d; want 413, not run", limit, n, declared, status, got, runs.Load()-before)
				case n <= limit && (status != http.StatusOK || got != fmt.Sprint(n)):
					t.Errorf("limit %d, %d bytes (declared %v): %d %q; want 200 %d", limit, n, declared, status, got, n)
				case n <= limit && n > 0:
					if status, _ := send(body[:n-1] + "b"); status != http.StatusUnprocessableEntity {
						t.Errorf("limit %d, %d bytes (declared %v): the last byte changed under the same key: %d; want 422", limit, n, declared, status)
					}
				}
			}
		}
		srv.Close()
	}
}

// Promise: as for TestReview17LateHeaderWhileRecording, for the status: a
// handler that returned without writing (an empty 200, recorded as such)
// and whose kept writer sets a status while the outcome is recorded must
// not tell its client something else than what its duplicates replay.
func TestReview17LateStatusWhileRecording(t *testing.T) {
	late := make(chan chan error, 1)
	store := hookStore{Store: teststores.Memory(t)}
	store.beforeTransition = func() {
		select {
		case res := <-late:
			res <- nil
			<-res
		default:
		}
	}
	rt, err := runtime.New(store)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		res := make(chan error)
		late <- res
		go func() {
			<-res
			w.WriteHeader(http.StatusInternalServerError)
			res <- nil
		}()
	})
	srv := httptest.NewServer(idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux))
	defer srv.Close()
	first := reviewPost(t, srv.URL+"/charges", "", "k1", "{}")
	dup := reviewPost(t, srv.URL+"/charges", "", "k1", "{}")
	if first.status != dup.status {
		t.Errorf("the first client was told %d, its duplicate %d (replayed %v): the first answer is not what was recorded", first.status, dup.status, dup.replayed)
	}
}
