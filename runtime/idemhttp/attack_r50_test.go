package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
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

type r50UnwrapPanics struct{}

func (r50UnwrapPanics) Error() string { return "r50 unwrap panics" }
func (r50UnwrapPanics) Unwrap() error { panic("r50: Unwrap") }

type r50UnwrapsPanics struct{}

func (r50UnwrapsPanics) Error() string   { return "r50 unwraps panics" }
func (r50UnwrapsPanics) Unwrap() []error { panic("r50: Unwrap []") }

type r50AsPanics struct{}

func (r50AsPanics) Error() string   { return "r50 as panics" }
func (r50AsPanics) As(any) bool     { panic("r50: As") }
func (r50AsPanics) Is(error) bool   { panic("r50: Is") }
func (r50AsPanics) Timeout() bool   { return false }
func (r50AsPanics) Temporary() bool { return false }

type r50NilPanic struct{}

func (r50NilPanic) Error() string { return "r50 nil panic" }
func (r50NilPanic) Unwrap() error { panic(nil) }

func r50Errs() map[string]error {
	shared := errors.New("shared")
	return map[string]error{
		"unwrap":        r50UnwrapPanics{},
		"unwraps":       r50UnwrapsPanics{},
		"as-is":         r50AsPanics{},
		"nilpanic":      r50NilPanic{},
		"shared+unwrap": errors.Join(shared, shared, r50UnwrapPanics{}),
		"shared+as":     errors.Join(shared, shared, r50AsPanics{}),
		"wrapped-as":    fmt.Errorf("w: %w", errors.Join(r50AsPanics{}, shared, shared)),
	}
}

// README: "The adapters read runtime.Do's errors, which may hold a query's,
// past an Is, As or Unwrap method that panics." docs/http.md: answers for
// ErrOutcomeUnknown (409 outcome-unknown) and a query's OutcomeFailed (422
// failed); idemhttp doc: "An error beside any outcome but
// runtime.OutcomeFailed means the query could not tell: the record stays
// UNKNOWN."
func TestR50HTTPQueryPanickyErrors(t *testing.T) {
	outcomes := map[string]runtime.Outcome{
		"unknown": runtime.OutcomeUnknown, "succeeded": runtime.OutcomeSucceeded,
		"nothappened": runtime.OutcomeNotHappened, "failed": runtime.OutcomeFailed,
	}
	for en, qerr := range r50Errs() {
		for on, o := range outcomes {
			t.Run(en+"/"+on, func(t *testing.T) {
				testenv.Within(t, 15*time.Second, func() {
					rt, err := runtime.New(memstore.New())
					if err != nil {
						t.Error(err)
						return
					}
					runs := 0
					mux := http.NewServeMux()
					mux.HandleFunc("POST /r50", func(w http.ResponseWriter, r *http.Request) {
						runs++
						w.WriteHeader(http.StatusGatewayTimeout)
					})
					h := idemhttp.Middleware(rt, idemhttp.Query("POST /r50", func(ctx context.Context, req idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
						return idemhttp.Response{Status: 201, Body: []byte("ok")}, o, qerr
					}, runtime.QueryOptions{}))(mux)
					var got []string
					var codes []int
					for i := 0; i < 3; i++ {
						func() {
							defer func() {
								if p := recover(); p != nil {
									t.Errorf("request %d: middleware panicked: %v", i, p)
								}
							}()
							req := httptest.NewRequest("POST", "/r50", strings.NewReader(`{"a":1}`))
							req.Header.Set("Idempotency-Key", "r50-q")
							rec := httptest.NewRecorder()
							h.ServeHTTP(rec, req)
							codes = append(codes, rec.Code)
							got = append(got, fmt.Sprintf("%d %s", rec.Code, strings.TrimSpace(rec.Body.String())))
						}()
					}
					t.Logf("answers: %q", got)
					if runs != 1 {
						t.Errorf("handler ran %d times", runs)
					}
					want := http.StatusConflict
					if o == runtime.OutcomeFailed {
						want = http.StatusUnprocessableEntity
					}
					for i := 1; i < len(codes); i++ {
						if codes[i] != want {
							t.Errorf("answer %d = %s, want %d", i, got[i], want)
						}
					}
				})
			})
		}
	}
}
