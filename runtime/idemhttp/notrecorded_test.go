package idemhttp_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/teststores"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// Promise (runtime.ErrNotRecorded): when the operation's query finds the
// effect done but its SUCCESS cannot be recorded, the answer is the query's
// response ("use the response: the effect happened"), as it is for a
// client whose handler ran. Schedule: the handler answers 504 (UNKNOWN);
// a duplicate's query says the charge went through while the store fails
// SUCCESS writes; then the store recovers and a third request converges.
func TestQueryFoundDoneUnrecordedServesResponse(t *testing.T) {
	for _, st := range teststores.All() {
		t.Run(st.Name, func(t *testing.T) {
			store := &teststores.SuccessDown{Store: st.New(t)}
			// A short lease: the duplicate that could not record leaves the
			// record UNKNOWN under its lease, which the third request waits
			// out (MaxWait) before it takes the record and asks again.
			rt, err := runtime.New(store, runtime.WithLease(time.Second), runtime.WithMaxWait(5*time.Second),
				runtime.WithCompletionTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			var runs, queries atomic.Int32
			mux := http.NewServeMux()
			mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusGatewayTimeout)
			})
			q := func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
				queries.Add(1)
				return idemhttp.Response{Status: http.StatusCreated, Body: []byte("charged " + string(req.Body))}, runtime.OutcomeSucceeded, nil
			}
			srv := httptest.NewServer(idemhttp.Middleware(rt,
				idemhttp.Logger(slog.New(slog.DiscardHandler)),
				idemhttp.Query("POST /charges", q, runtime.QueryOptions{}))(mux))
			defer srv.Close()

			if a := reviewPost(t, srv.URL+"/charges", "", "k1", "42"); a.status != http.StatusGatewayTimeout {
				t.Fatalf("first request: %d %q, want the handler's 504", a.status, a.body)
			}
			store.Down.Store(true)
			a := reviewPost(t, srv.URL+"/charges", "", "k1", "42")
			if store.Failed.Load() == 0 {
				t.Fatalf("no SUCCESS write failed (answer %d %q): the schedule was not reproduced", a.status, a.body)
			}
			if a.status != http.StatusCreated || a.body != "charged 42" {
				t.Errorf("duplicate whose query found the charge done, SUCCESS not recorded: %d %q, want 201 %q", a.status, a.body, "charged 42")
			}
			store.Down.Store(false)
			a = reviewPost(t, srv.URL+"/charges", "", "k1", "42")
			if a.status != http.StatusCreated || a.body != "charged 42" {
				t.Errorf("after the store recovered: %d %q, want 201 %q", a.status, a.body, "charged 42")
			}
			a = reviewPost(t, srv.URL+"/charges", "", "k1", "42")
			if a.status != http.StatusCreated || a.body != "charged 42" || !a.replayed {
				t.Errorf("replay: %d %q replayed=%v, want the recorded 201 %q", a.status, a.body, a.replayed, "charged 42")
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want 1", n)
			}
		})
	}
}
