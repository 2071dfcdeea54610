package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/runtime"
)

// recordJSON is a record as -json prints it: one object per record, the
// same fields for list and show. Request and response are JSON when they
// are valid JSON (the runtime's default codec), else base64 in the _base64
// field; a FAILED record's failure is decoded too.
type recordJSON struct {
	Scope           string          `json:"scope"`
	Operation       string          `json:"operation"`
	Key             string          `json:"key"`
	State           runtime.State   `json:"state"`
	Owner           string          `json:"owner"`
	Version         int64           `json:"version"`
	Lease           string          `json:"lease"`
	LeaseExpiresAt  *time.Time      `json:"lease_expires_at"`
	ExpiresAt       *time.Time      `json:"expires_at"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	StoreNow        time.Time       `json:"store_now"`
	AgeSeconds      float64         `json:"age_seconds"`
	Attempts        int32           `json:"attempts"`
	Takeovers       int32           `json:"takeovers"`
	Fingerprint     string          `json:"fingerprint"`
	Request         json.RawMessage `json:"request,omitempty"`
	RequestBase64   []byte          `json:"request_base64,omitempty"`
	Response        json.RawMessage `json:"response,omitempty"`
	ResponseBase64  []byte          `json:"response_base64,omitempty"`
	ResponseOmitted bool            `json:"response_omitted"`
	Failure         *failureJSON    `json:"failure,omitempty"`
	Note            string          `json:"note"`
	Token           string          `json:"token"`
}

type failureJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// splitJSON returns b as JSON when it is valid JSON, else as bytes.
func splitJSON(b []byte) (json.RawMessage, []byte) {
	if len(b) == 0 {
		return nil, nil
	}
	if json.Valid(b) {
		var buf bytes.Buffer
		if json.Compact(&buf, b) == nil {
			return buf.Bytes(), nil
		}
	}
	return nil, b
}

func toJSON(r *runtime.Record) recordJSON {
	j := recordJSON{
		Scope: r.ID.Scope, Operation: r.ID.Operation, Key: r.ID.Key, State: r.State, Owner: r.Owner, Version: r.Version,
		Lease: leaseKind(r), LeaseExpiresAt: optTime(r.LeaseExpiresAt), ExpiresAt: optTime(r.ExpiresAt),
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), StoreNow: r.StoreNow.UTC(),
		AgeSeconds: r.StoreNow.Sub(r.CreatedAt).Seconds(), Attempts: r.Attempts, Takeovers: r.Takeovers,
		Fingerprint: hex.EncodeToString(r.Fingerprint), ResponseOmitted: r.ResponseOmitted, Note: r.Note, Token: r.Token,
	}
	j.Request, j.RequestBase64 = splitJSON(r.Request)
	j.Response, j.ResponseBase64 = splitJSON(r.Response)
	if r.State == runtime.StateFailed {
		if f, err := runtime.DecodeFailure(r.ID, r.Response); err == nil {
			j.Failure = &failureJSON{Code: f.Code, Message: f.Message}
		}
	}
	return j
}

// leaseKind says who holds the record: "held" (a worker or a reconciler on
// it), "held-off" (UNKNOWN, no owner, waiting out a backoff), "expired"
// (PROCESSING whose worker died, or an UNKNOWN whose hold ended) or "free".
func leaseKind(r *runtime.Record) string {
	switch {
	case r.LeaseExpiresAt.IsZero():
		return "free"
	case r.LeaseLive() && r.Owner == "" && r.State == runtime.StateUnknown:
		return "held-off"
	case r.LeaseLive():
		return "held"
	}
	return "expired"
}

// leaseText is the LEASE column: the kind and how long.
func leaseText(r *runtime.Record) string {
	switch k := leaseKind(r); k {
	case "free":
		return k
	case "expired":
		return "expired " + shortDuration(r.StoreNow.Sub(r.LeaseExpiresAt)) + " ago"
	default:
		return k + " " + shortDuration(r.LeaseExpiresAt.Sub(r.StoreNow))
	}
}

// shortDuration prints d the way a person reads an age: 42s, 3m12s, 5h03m, 4d3h.
func shortDuration(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// cell makes s safe for one table cell: no tabs or line breaks, "" shown.
func cell(s string) string {
	if s == "" {
		return `""`
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

func writeTable(w io.Writer, recs []runtime.Record) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tAGE\tATTEMPTS\tTAKEOVERS\tLEASE\tSCOPE\tOPERATION\tKEY\tNOTE")
	for i := range recs {
		r := &recs[i]
		note := r.Note
		if note == "" {
			note = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.State, shortDuration(r.StoreNow.Sub(r.CreatedAt)),
			r.Attempts, r.Takeovers, leaseText(r), cell(r.ID.Scope), cell(r.ID.Operation), r.ID.Key, cell(note))
	}
	return tw.Flush()
}

// A cursor is scope/operation/key, each part path-escaped (a "/" in a part
// is %2F, a "%" is %25); the unscoped namespace is the empty first part.
func formatCursor(id runtime.Identity) string {
	return url.PathEscape(id.Scope) + "/" + url.PathEscape(id.Operation) + "/" + url.PathEscape(id.Key)
}

func parseCursor(s string) (runtime.Identity, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return runtime.Identity{}, fmt.Errorf("want scope/operation/key (escape a '/' inside a part as %%2F), got %d parts in %q", len(parts), s)
	}
	var dec [3]string
	for i, p := range parts {
		d, err := url.PathUnescape(p)
		if err != nil {
			return runtime.Identity{}, fmt.Errorf("part %d of %q: %w", i+1, s, err)
		}
		dec[i] = d
	}
	id := runtime.Identity{Scope: dec[0], Operation: dec[1], Key: dec[2]}
	if id.Operation == "" || id.Key == "" {
		return runtime.Identity{}, fmt.Errorf("operation and key must not be empty in %q", s)
	}
	return id, nil
}
