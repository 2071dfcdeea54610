package idemhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// TestResponseHeadersAsWritten: the first client gets the headers the
// handler had when it wrote its status, as from net/http alone, and the
// record holds exactly those (less the ones never stored): a header set
// after the status reaches no one, one deleted after it is sent, and a
// trailer (declared in Trailer, or named with http.TrailerPrefix) goes to
// the first client as a trailer and is never stored nor replayed. (Review
// r44: a declared trailer was stored and replayed as a header and the
// first client got it twice; a header set after WriteHeader was sent,
// recorded and replayed.)
func TestResponseHeadersAsWritten(t *testing.T) {
	type want struct{ header, trailer string }
	cases := []struct {
		name    string
		handler http.HandlerFunc
		first   want // X-Test of the first response
		replay  string
	}{
		{"set after WriteHeader", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "body")
			w.Header().Set("X-Test", "late")
		}, want{"", ""}, ""},
		{"set after the first Write", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "body")
			w.Header().Set("X-Test", "late")
		}, want{"", ""}, ""},
		{"deleted after WriteHeader", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Test", "early")
			w.WriteHeader(http.StatusCreated)
			w.Header().Del("X-Test")
			io.WriteString(w, "body")
		}, want{"early", ""}, "early"},
		{"changed after WriteHeader", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Test", "early")
			w.WriteHeader(http.StatusCreated)
			w.Header().Set("X-Test", "late")
			w.Header().Add("X-Test", "later")
		}, want{"early", ""}, "early"},
		{"replaced after WriteHeader", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Test", "early")
			w.WriteHeader(http.StatusCreated)
			w.Header().Set("X-Test", "later")
		}, want{"early", ""}, "early"},
		{"value changed in place after WriteHeader", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Test", "early")
			v := w.Header()["X-Test"]
			w.WriteHeader(http.StatusCreated)
			v[0] = "late" // net/http copied the values at the status
		}, want{"early", ""}, "early"},
		{"set, no status written", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Test", "at return")
		}, want{"at return", ""}, "at return"},
		{"declared trailer", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Test")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "body")
			w.Header().Set("X-Test", "sum")
		}, want{"", "sum"}, ""},
		{"declared trailer, also set before the status", func(w http.ResponseWriter, r *http.Request) {
			// net/http sends both: the header, then the trailer.
			w.Header().Set("Trailer", "X-Test")
			w.Header().Set("X-Test", "early")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "body")
			w.Header().Set("X-Test", "sum")
		}, want{"early", "sum"}, ""},
		{"prefixed trailer after the status, small body", func(w http.ResponseWriter, r *http.Request) {
			// net/http sends the small body with a Content-Length: no
			// trailer can follow, and it drops the one set after the
			// status (review r47).
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "body")
			w.Header().Set(http.TrailerPrefix+"X-Test", "sum")
		}, want{"", ""}, ""},
		{"prefixed trailer after the status, body past net/http's buffer", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, strings.Repeat("b", 4096)) // chunked
			w.Header().Set(http.TrailerPrefix+"X-Test", "sum")
		}, want{"", "sum"}, ""},
		{"prefixed trailer before the status", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(http.TrailerPrefix+"X-Test", "draft")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "body")
			w.Header().Set(http.TrailerPrefix+"X-Test", "sum")
		}, want{"", "sum"}, ""},
	}
	testenv.Within(t, 15*time.Second, func() {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				rt, err := runtime.New(memstore.New())
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(idemhttp.Middleware(rt)(c.handler))
				defer srv.Close()
				send := func() *http.Response {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader("x"))
					req.Header.Set(idemhttp.DefaultHeader, "k")
					resp, err := srv.Client().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					_, _ = io.ReadAll(resp.Body) // trailers come after the body
					resp.Body.Close()
					return resp
				}
				first := send()
				got := want{first.Header.Get("X-Test"), first.Trailer.Get("X-Test")}
				if got != c.first {
					t.Errorf("first response: X-Test header %q, trailer %q; want %q, %q", got.header, got.trailer, c.first.header, c.first.trailer)
				}
				replay := send()
				if replay.Header.Get(idemhttp.ReplayedHeader) != "true" {
					t.Fatalf("second response not replayed: %d", replay.StatusCode)
				}
				if h, tr := replay.Header.Get("X-Test"), replay.Trailer.Get("X-Test"); h != c.replay || tr != "" || replay.Header.Get("Trailer") != "" {
					t.Errorf("replay: X-Test header %q, trailer %q, Trailer %q; want %q and no trailer", h, tr, replay.Header.Get("Trailer"), c.replay)
				}
			})
		}
	})
}
