package idemhttp

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	longestWait := time.Duration(math.MaxInt64/int64(time.Second)) * time.Second
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{" 7 ", 7 * time.Second},
		{"1.5", 0},
		{"soon", 0},
		{"172800", 48 * time.Hour}, // past a day, as asked (review r53)
		{"99999999999", longestWait},
		{"99999999999999999999", longestWait}, // past int64: as long as a wait gets
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"Tuesday, 01-Dec-26 12:00:30 GMT", 30 * time.Second}, // RFC 850, obsolete but allowed
	} {
		if got := retryAfter(tt.in, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	tr := &Transport{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for _, tt := range []struct {
		attempt int
		lo, hi  time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, 500 * time.Millisecond, time.Second}, // capped
		{60, 500 * time.Millisecond, time.Second},
	} {
		for range 200 {
			if d := tr.backoff(tt.attempt); d < tt.lo || d > tt.hi {
				t.Fatalf("backoff(%d) = %v; want in [%v, %v]", tt.attempt, d, tt.lo, tt.hi)
			}
		}
	}
}

func TestSFString(t *testing.T) {
	for key, want := range map[string]string{
		"8e03978e-40d5-43e8-bc93-6894a57f9324": `"8e03978e-40d5-43e8-bc93-6894a57f9324"`,
		`order"1`:                              `"order\"1"`,
		`a\b`:                                  `"a\\b"`,
		"order,2":                              `"order,2"`,
		`\"`:                                   `"\\\""`,
	} {
		got := sfString(key)
		if got != want {
			t.Errorf("sfString(%q) = %s, want %s", key, got, want)
		}
		if back, err := parseKey(got); err != nil || back != key {
			t.Errorf("the middleware reads %s as %q, %v; want %q", got, back, err, key)
		}
	}
}

// TestQuotedKey: a key the Transport sets goes bare by default, as an
// sf-string with QuotedKey or when a bare field cannot carry it; the
// request's own field goes as written either way.
func TestQuotedKey(t *testing.T) {
	for _, tt := range []struct {
		quoted         bool
		key, own, want string
	}{
		{false, "k-1", "", "k-1"},
		{true, "k-1", "", `"k-1"`},
		{false, `order"1`, "", `"order\"1"`},
		{false, "order,2", "", `"order,2"`},
		{false, `a\b`, "", `"a\\b"`},
		{true, "k-1", "mine", "mine"},
		{false, "k-1", `"mine"`, `"mine"`},
	} {
		var got string
		tr := &Transport{QuotedKey: tt.quoted, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			got = r.Header.Get(DefaultHeader)
			return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})}
		req, _ := http.NewRequestWithContext(WithKey(context.Background(), tt.key), http.MethodPost, "http://example.com/charges", nil)
		if tt.own != "" {
			req.Header.Set(DefaultHeader, tt.own)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got != tt.want {
			t.Errorf("QuotedKey %v, key %q, own field %q: sent %s, want %s", tt.quoted, tt.key, tt.own, got, tt.want)
		}
		if back, err := parseKey(got); tt.own == "" && (err != nil || back != tt.key) {
			t.Errorf("the middleware reads %s as %q, %v; want %q", got, back, err, tt.key)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
