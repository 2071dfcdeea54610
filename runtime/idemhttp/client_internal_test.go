package idemhttp

import (
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
