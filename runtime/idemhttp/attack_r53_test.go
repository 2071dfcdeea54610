package idemhttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime/idemhttp"
)

// r53rt is a Base that answers every attempt with 200 and remembers the
// key header each attempt carried.
type r53rt struct{ keys [][]string }

func (b *r53rt) RoundTrip(r *http.Request) (*http.Response, error) {
	b.keys = append(b.keys, r.Header.Values("Idempotency-Key"))
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// TestR53EmptyMethodIsGET: net/http says "For client requests, an empty
// string means GET" (http.Request.Method), and the Transport promises that
// "Requests with a safe method get no key" (docs/http.md: "Safe methods
// (GET, HEAD, OPTIONS, TRACE) get none").
func TestR53EmptyMethodIsGET(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		for _, m := range []string{http.MethodGet, ""} {
			base := &r53rt{}
			tr := &idemhttp.Transport{Base: base}
			req, err := http.NewRequest(http.MethodGet, "http://example.invalid/charges", nil)
			if err != nil {
				t.Error(err)
				return
			}
			req.Method = m
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			res, _ := idemhttp.ResultOf(resp)
			if len(base.keys) != 1 || len(base.keys[0]) != 0 || res.Key != "" {
				t.Errorf("method %q (a GET): the attempt carried Idempotency-Key %q (Result.Key %q); a safe method gets none", m, base.keys, res.Key)
			}
		}
	})
}

// r53busy answers every attempt 503 with the given Retry-After.
type r53busy struct {
	retryAfter string
	attempts   int
}

func (b *r53busy) RoundTrip(r *http.Request) (*http.Response, error) {
	b.attempts++
	if r.Body != nil {
		_ = r.Body.Close()
	}
	h := http.Header{}
	h.Set("Retry-After", b.retryAfter)
	return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: h, Body: io.NopCloser(strings.NewReader("busy")), Request: r}, nil
}

// TestR53RetryAfterSecondsOverADay: "a Retry-After header (delay-seconds
// or an HTTP-date) is honoured: the wait is at least that long", and "when
// the next attempt would start after its deadline, RoundTrip returns the
// last response (or error) at once instead of sleeping" (go doc
// idemhttp.Transport). A Transport whose MaxRetryAfter allows waits of
// days, told Retry-After: 172800 (48 h) under a deadline 30 h away, must
// answer the 503 at once: the next attempt may not start before 48 h,
// after the deadline. The same wait as an HTTP-date is the control.
func TestR53RetryAfterSecondsOverADay(t *testing.T) {
	for _, form := range []string{"date", "seconds"} {
		t.Run(form, func(t *testing.T) {
			testenv.Within(t, 15*time.Second, func() {
				ra := "172800"
				if form == "date" {
					ra = time.Now().Add(48 * time.Hour).UTC().Format(http.TimeFormat)
				}
				base := &r53busy{retryAfter: ra}
				tr := &idemhttp.Transport{Base: base, MaxRetryAfter: 100 * time.Hour}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Hour)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://example.invalid/charges", strings.NewReader("{}"))
				done := make(chan struct{})
				var resp *http.Response
				var err error
				go func() {
					defer close(done)
					resp, err = tr.RoundTrip(req)
				}()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Errorf("Retry-After %q (48 h) with a deadline 30 h away: RoundTrip still sleeping after 5 s (attempts %d); the doc says it returns the 503 at once", ra, base.attempts)
					cancel()
					<-done
					return
				}
				if err != nil {
					t.Errorf("Retry-After %q: err %v, want the 503", ra, err)
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != 503 || base.attempts != 1 {
					t.Errorf("Retry-After %q: status %d after %d attempts, want the first 503", ra, resp.StatusCode, base.attempts)
				}
			})
		})
	}
}
