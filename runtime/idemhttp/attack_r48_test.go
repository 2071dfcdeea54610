// Review r48: idemhttp wire fidelity against net/http alone.

package idemhttp_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// docs/http.md, behaviour table: "retry after success | stored status,
// headers and body, with Idempotent-Replayed: true"; Headers: "What is
// stored is replayed byte for byte, under each header's canonical name: a
// handler that sets x-dup and X-Dup replays both values, in order, under
// X-Dup". Schedule: the handler writes its header map directly with a
// non-canonical key, w.Header()["content-length"] = {"3"}, then writes
// "hello" (200). net/http alone, and the middleware's first answer, frame
// the body by the canonical Content-Length it computes (5) and send the
// lowercase line as an opaque header: the client gets "hello". The
// replay canonicalises the stored name into the framing header
// Content-Length: 3, so net/http refuses the stored body
// (ErrContentLength): the duplicate gets a 200 with no body at all (and
// no Content-Type), promised 3 bytes it never receives.
func TestR48NonCanonicalContentLengthReplayLosesBody(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header()["content-length"] = []string{"3"}
		io.WriteString(w, "hello")
	}
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	mw := httptest.NewServer(idemhttp.Middleware(rt)(http.HandlerFunc(h)))
	defer mw.Close()
	first := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
	replay := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
	t.Logf("\nfirst:  %q\nreplay: %q", first, replay)
	_, _, fb := r47Parse(first)
	_, _, rb := r47Parse(replay)
	if fb != rb {
		t.Errorf("body: the first client got %q, the replay %q", fb, rb)
	}
}

// Review r48 found io.Copy past a declared Content-Length answered
// otherwise than by net/http alone over plain TCP: there net/http writes
// the first 512 bytes through Write, then hands the rest to the
// connection's ReadFrom unchecked (the bytes past the length go out on the
// wire; io.Copy returns nil). Over TLS net/http's writes are checked, and
// the overrunning write fails with ErrContentLength, as the middleware's
// always do. docs/http.md now says so; this test holds the documented
// behaviour: io.Copy gets ErrContentLength, the first client and the
// replay get the same response.
func TestR48CopyPastContentLengthFailsAsDocumented(t *testing.T) {
	copyErr := make(chan error, 2)
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "600")
		_, err := io.Copy(w, struct{ io.Reader }{strings.NewReader(strings.Repeat("a", 1000))})
		copyErr <- err
	}
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	mw := httptest.NewServer(idemhttp.Middleware(rt)(http.HandlerFunc(h)))
	defer mw.Close()
	first := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
	if err := <-copyErr; !errors.Is(err, http.ErrContentLength) {
		t.Errorf("io.Copy past the declared length: %v; want http.ErrContentLength", err)
	}
	replay := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
	fh, fb, _ := strings.Cut(first, "\r\n\r\n")
	rh, rb, _ := strings.Cut(replay, "\r\n\r\n")
	if fb != rb || !strings.Contains(rh, "Idempotent-Replayed: true") || strings.Count(fh, "\r\n") != strings.Count(rh, "\r\n")-1 {
		t.Errorf("first: %q + %q\nreplay: %q + %q", fh, fb, rh, rb)
	}
}
