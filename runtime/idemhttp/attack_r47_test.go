// Review r47: idemhttp response wire fidelity.

package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

var r47Cases = []struct {
	name string
	h    http.HandlerFunc
}{
	{"cl short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "hello")
	}},
	{"cl short explicit status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		w.WriteHeader(201)
		io.WriteString(w, "hel")
		io.WriteString(w, "lo")
	}},
	{"cl zero with body", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
		io.WriteString(w, "hello")
	}},
	{"cl invalid", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "abc")
		io.WriteString(w, "hello")
	}},
	{"cl plus", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "+5")
		io.WriteString(w, "hello")
	}},
	{"cl two values", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Length"] = []string{"5", "5"}
		io.WriteString(w, "hello")
	}},
	{"cl straddle", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4")
		io.WriteString(w, "hel")
		io.WriteString(w, "lo")
	}},
	{"204 with cl and body", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(204)
		io.WriteString(w, "hello")
	}},
	{"304 with cl and body", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("ETag", `"x"`)
		w.WriteHeader(304)
		io.WriteString(w, "hello")
	}},
	{"204 with trailer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		w.WriteHeader(204)
		w.Header().Set("X-T", "v")
	}},
	{"trailer set before status too", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		w.Header().Set("X-T", "early")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set("X-T", "late")
	}},
	{"trailer lowercase declared", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "x-t")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set("X-T", "v")
	}},
	{"trailer declared twice", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Trailer", "X-T")
		w.Header().Add("Trailer", "X-U, X-T")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set("X-T", "v")
		w.Header().Set("X-U", "u")
	}},
	{"trailer with cl", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		w.Header().Set("Content-Length", "4")
		io.WriteString(w, "body")
		w.Header().Set("X-T", "v")
	}},
	{"prefix trailer set before status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(http.TrailerPrefix+"X-T", "v")
		w.WriteHeader(201)
		io.WriteString(w, "body")
	}},
	{"declared trailer deleted", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T, X-U")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set("X-T", "v")
		w.Header().Del("Trailer")
	}},
	{"trailer declared after status", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		w.Header().Set("Trailer", "X-T")
		io.WriteString(w, "body")
		w.Header().Set("X-T", "v")
	}},
	{"trailer forbidden declared set early", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Content-Type, X-T")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set("Content-Type", "text/late")
		w.Header().Set("X-T", "v")
	}},
	{"transfer-encoding chunked with cl", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked")
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	}},
	{"transfer-encoding identity", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "identity")
		io.WriteString(w, "hello")
	}},
	{"content-type suppressed nil with body", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "<html")
	}},
	{"connection close header", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "hello")
	}},
	{"status 100 then 200", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(100)
		io.WriteString(w, "hello")
	}},
	{"write header twice", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		w.WriteHeader(202)
		io.WriteString(w, "hello")
	}},
	{"status 999", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(299)
		io.WriteString(w, "hello")
	}},
	{"cl flush overrun", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "hello")
		w.(http.Flusher).Flush()
		io.WriteString(w, "0123456789")
		io.WriteString(w, "abcde")
	}},
	{"cl flush exact in parts", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "hello")
		w.(http.Flusher).Flush()
		io.WriteString(w, "world")
	}},
	{"flush then prefix trailer", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
		w.(http.Flusher).Flush()
		w.Header().Set(http.TrailerPrefix+"X-T", "v")
	}},
	{"declared trailer flush", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		io.WriteString(w, "hello")
		w.(http.Flusher).Flush()
		w.Header().Set("X-T", "v")
	}},
	{"flush before any write", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "1")
		w.(http.Flusher).Flush()
		w.Header().Set("X-B", "2")
		io.WriteString(w, "hello")
	}},
	{"204 flush", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(204)
		w.(http.Flusher).Flush()
		io.WriteString(w, "x")
	}},
	{"103 then flush", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(103)
		w.Header().Del("Link")
		w.(http.Flusher).Flush()
		io.WriteString(w, "hello")
	}},
	{"declared trailer value deleted", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set("X-T", "v")
		w.Header().Del("X-T")
	}},
	{"declared trailer value changed in place", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set("X-T", "v")
		w.Header()["X-T"][0] = "w"
	}},
	{"declared trailer set to nil", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header()["X-T"] = nil
	}},
	{"prefix trailer explicit status then deleted", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		io.WriteString(w, strings.Repeat("a", 3000))
		w.Header().Set(http.TrailerPrefix+"X-T", "v")
		w.Header().Set(http.TrailerPrefix+"X-U", "u")
		w.Header().Del(http.TrailerPrefix + "X-T")
	}},
	{"prefix forbidden big body", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		io.WriteString(w, strings.Repeat("a", 3000))
		w.Header().Set(http.TrailerPrefix+"Content-Type", "text/x")
		w.Header().Set(http.TrailerPrefix+"Content-Length", "9")
	}},
	{"declared trailer big body", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-T, Host")
		io.WriteString(w, strings.Repeat("a", 3000))
		w.Header().Set("X-T", "v")
		w.Header().Set("Host", "h")
	}},
}

// HELD (cases that matched net/http alone). Left out: the prefix trailers
// after an implicit status (finding below) and a 3000-byte body written in
// three parts (net/http chunks it 2048+952, the middleware 3000: framing only).
// docs/http.md, behaviour table: "its client gets the response as written
// (all headers, 1xx included)"; Headers: "as from net/http alone".
func TestR47WireAsNetHTTP(t *testing.T) {
	for _, c := range r47Cases {
		t.Run(c.name, func(t *testing.T) {
			plain := httptest.NewServer(c.h)
			defer plain.Close()
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			mw := httptest.NewServer(idemhttp.Middleware(rt)(c.h))
			defer mw.Close()
			p := rawExchange(t, strings.TrimPrefix(plain.URL, "http://"), http.MethodPost, "k")
			first := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
			replay := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
			t.Logf("\nnet/http: %q\nfirst:    %q\nreplay:   %q", p, first, replay)
			if r47Dechunk(p) != r47Dechunk(first) {
				t.Errorf("the first client's bytes differ from net/http alone's (chunk boundaries aside)")
			}
		})
	}
}

// r47Dechunk rewrites a chunked body as one chunk, so that only chunk
// boundaries (framing, not content) are ignored.
func r47Dechunk(raw string) string {
	head, rest, ok := strings.Cut(raw, "\r\n\r\n")
	if !ok || !strings.Contains(head, "Transfer-Encoding: chunked") {
		return raw
	}
	var body strings.Builder
	for {
		line, after, ok := strings.Cut(rest, "\r\n")
		if !ok {
			return raw
		}
		var n int
		if _, err := fmt.Sscanf(line, "%x", &n); err != nil {
			return raw
		}
		if n == 0 {
			return head + "\r\n\r\n" + fmt.Sprintf("%x\r\n", body.Len()) + body.String() + "\r\n0\r\n" + after
		}
		if len(after) < n+2 {
			return raw
		}
		body.WriteString(after[:n])
		rest = after[n+2:]
	}
}

// docs/http.md, Headers: "The first client gets the headers the handler
// had when it wrote its status (WriteHeader, or its first Write, or its
// return), as from net/http alone". A handler whose first Write writes
// the status (200) and that names a trailer with http.TrailerPrefix after
// it, with a small body: net/http alone snapshots the header at that
// first Write, computes Content-Length at the handler's return and sends
// no trailer. Through the middleware the first client gets
// Transfer-Encoding: chunked instead of that Content-Length, and a
// trailer net/http would not send (the doc's own trailer sentence says
// prefix trailers "reach the first client as trailers": the two promises
// conflict here, and net/http's bytes are not kept).
func TestR47PrefixTrailerAfterImplicitStatusNotAsNetHTTP(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"ch_1"}`) // the status (200) is written here
		w.Header().Set(http.TrailerPrefix+"X-Checksum", "abc")
	}
	plain := httptest.NewServer(http.HandlerFunc(h))
	defer plain.Close()
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	mw := httptest.NewServer(idemhttp.Middleware(rt)(http.HandlerFunc(h)))
	defer mw.Close()
	p := rawExchange(t, strings.TrimPrefix(plain.URL, "http://"), http.MethodPost, "k")
	first := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
	t.Logf("\nnet/http: %q\nfirst:    %q", p, first)
	if p != first {
		t.Errorf("the first client's bytes differ from net/http alone's: Content-Length %q / Transfer-Encoding %q (net/http: %q / %q)",
			r46HeaderLine(first, "Content-Length"), r46HeaderLine(first, "Transfer-Encoding"),
			r46HeaderLine(p, "Content-Length"), r46HeaderLine(p, "Transfer-Encoding"))
	}
}

// docs/http.md, Headers: "A write past the Content-Length the handler
// declared fails with http.ErrContentLength and is neither sent nor
// recorded, as with net/http alone." net/http counts every byte the
// handler tried to write: after one Write past the declared length, every
// later Write fails too. Schedule: Content-Length: 3; Write("abcd") fails
// (ErrContentLength); Write("abc") then also fails under net/http, which
// sends the header and no body. Through the middleware the second Write
// succeeds: the first client gets a complete "abc" that net/http would
// never send, and it is recorded and replayed.
func TestR47ContentLengthWriteAfterOverrun(t *testing.T) {
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprintf("flush=%v", flush), func(t *testing.T) {
			var mu sync.Mutex
			var secondErrs []error
			h := func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "3")
				io.WriteString(w, "abcd") // past the declared length: fails
				if flush {
					http.NewResponseController(w).Flush()
				}
				_, err := io.WriteString(w, "abc")
				mu.Lock()
				secondErrs = append(secondErrs, err)
				mu.Unlock()
			}
			plain := httptest.NewServer(http.HandlerFunc(h))
			defer plain.Close()
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			mw := httptest.NewServer(idemhttp.Middleware(rt)(http.HandlerFunc(h)))
			defer mw.Close()
			p := rawExchange(t, strings.TrimPrefix(plain.URL, "http://"), http.MethodPost, "k")
			first := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
			replay := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
			t.Logf("\nnet/http: %q\nfirst:    %q\nreplay:   %q\nsecond Write's error (net/http, middleware): %v", p, first, replay, secondErrs)
			if p != first {
				t.Errorf("the first client's bytes differ from net/http alone's")
			}
		})
	}
}

// docs/http.md, behaviour table: "retry after success | ... | stored
// status, headers and body, with Idempotent-Replayed: true"; Headers:
// "What is stored is replayed byte for byte" (and a Content-Type the
// handler suppressed "stays suppressed in the replay"). A handler that
// sets Transfer-Encoding itself (chunked, or identity) gets no sniffed
// Content-Type from net/http: the first client receives none. The
// middleware drops Transfer-Encoding (hop-by-hop) from the record, so in
// the replay net/http sniffs the body and adds a Content-Type
// (text/html for an HTML body) that the first client never got.
func TestR47ReplayGainsSniffedContentType(t *testing.T) {
	for _, te := range []string{"chunked", "identity"} {
		t.Run(te, func(t *testing.T) {
			h := func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Transfer-Encoding", te)
				w.WriteHeader(201)
				io.WriteString(w, "<html><body>created</body></html>")
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
			if got, want := r46HeaderLine(replay, "Content-Type"), r46HeaderLine(first, "Content-Type"); got != want {
				t.Errorf("Content-Type: the first client got %q, the replay %q", want, got)
			}
		})
	}
}

// r47Parse splits a raw HTTP/1.1 response (1xx skipped) into status line,
// header lines (minus framing, Date, Connection, Trailer and the replay
// marker) and body (de-chunked, trailers dropped).
func r47Parse(raw string) (status string, headers []string, body string) {
	for strings.HasPrefix(raw, "HTTP/1.1 1") {
		_, raw, _ = strings.Cut(raw, "\r\n\r\n")
	}
	head, rest, _ := strings.Cut(raw, "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	status = lines[0]
	chunked := false
	for _, l := range lines[1:] {
		k, _, _ := strings.Cut(l, ": ")
		switch http.CanonicalHeaderKey(k) {
		case "Transfer-Encoding":
			chunked = strings.Contains(l, "chunked")
			continue
		case "Content-Length", "Connection", "Trailer", "Idempotent-Replayed":
			continue
		}
		headers = append(headers, l)
	}
	if !chunked {
		return status, headers, rest
	}
	var b strings.Builder
	for {
		line, after, ok := strings.Cut(rest, "\r\n")
		var n int
		if _, err := fmt.Sscanf(line, "%x", &n); !ok || err != nil || n == 0 || len(after) < n+2 {
			return status, headers, b.String()
		}
		b.WriteString(after[:n])
		rest = after[n+2:]
	}
}

// docs/http.md: "retry after success | stored status, headers and body";
// every non-streamed case of the table, first answer against replay,
// framing, trailers and documented non-stored headers aside.
func TestR47ReplayMatchesFirst(t *testing.T) {
	for _, c := range r47Cases {
		t.Run(c.name, func(t *testing.T) {
			rt, err := runtime.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			mw := httptest.NewServer(idemhttp.Middleware(rt)(c.h))
			defer mw.Close()
			first := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
			replay := rawExchange(t, strings.TrimPrefix(mw.URL, "http://"), http.MethodPost, "k")
			switch c.name {
			case "trailer set before status too": // documented: a declared trailer's name is not stored
				t.Skip("documented")
			case "transfer-encoding chunked with cl", "transfer-encoding identity": // F8
				t.Skip("F8: TestR47ReplayGainsSniffedContentType")
			}
			fs, fh, fb := r47Parse(first)
			rs, rh, rb := r47Parse(replay)
			if strings.HasPrefix(rs, "HTTP/1.1 410") {
				t.Skip("streamed")
			}
			if fs != rs || fb != rb || strings.Join(fh, "|") != strings.Join(rh, "|") {
				t.Errorf("\nfirst:  %s %q %q\nreplay: %s %q %q", fs, fh, fb, rs, rh, rb)
			}
		})
	}
}
