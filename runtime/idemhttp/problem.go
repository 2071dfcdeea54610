package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// problemKind is a problem the middleware writes itself (RFC 9457).
type problemKind int

const (
	probKeyMissing problemKind = iota
	probKeyInvalid
	probKeyReused
	probInProgress
	probOutcomeUnknown
	probNotReplayable
	probBodyTooLarge
	probBodyUnreadable
	probStoreUnavailable
	probFailed
	probTimeout
	probCanceled
	probRecordUnreadable
)

// info returns the problem's name (the anchor of its type URI), status,
// title and Retry-After in seconds (0: none).
func (k problemKind) info() (name string, status int, title string, retryAfter int) {
	switch k {
	case probKeyMissing:
		return "key-missing", http.StatusBadRequest, "Idempotency key missing", 0
	case probKeyInvalid:
		return "key-invalid", http.StatusBadRequest, "Idempotency key invalid", 0
	case probKeyReused:
		return "key-reused", http.StatusUnprocessableEntity, "Idempotency key reused with another request", 0
	case probInProgress:
		return "in-progress", http.StatusConflict, "Request with this idempotency key in progress", 1
	case probOutcomeUnknown:
		return "outcome-unknown", http.StatusConflict, "Outcome of the request with this idempotency key unknown", 5
	case probNotReplayable:
		return "not-replayable", http.StatusGone, "Response not stored", 0
	case probBodyTooLarge:
		return "body-too-large", http.StatusRequestEntityTooLarge, "Request body too large", 0
	case probBodyUnreadable:
		return "body-unreadable", http.StatusBadRequest, "Request body unreadable", 0
	case probFailed:
		return "failed", http.StatusUnprocessableEntity, "Request with this idempotency key failed", 0
	case probTimeout:
		return "timeout", http.StatusGatewayTimeout, "Deadline passed while waiting", 1
	case probCanceled:
		return "canceled", StatusClientClosedRequest, "Request canceled while waiting", 0
	case probRecordUnreadable:
		return "record-unreadable", http.StatusInternalServerError, "Stored outcome unreadable", 0
	}
	return "store-unavailable", http.StatusServiceUnavailable, "Idempotency store unavailable", 2
}

// Problem is the body of an error the middleware writes
// (application/problem+json, RFC 9457). It never names the operation, the
// key or an internal error.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Code is the stored code of a request that failed for good (problem
	// "failed"), if it has one.
	Code string `json:"code,omitempty"`
}

// StatusClientClosedRequest (499, as nginx names it) answers a request
// that was canceled while it waited: its client has gone, so the status is
// for logs and proxies.
const StatusClientClosedRequest = 499

// failed answers a request whose record is FAILED (resolved as failed by
// hand or by a no-query policy, or by a query): 422 with the stored code
// and message, the same for every duplicate.
func (m *middleware) failed(w http.ResponseWriter, code, message string) {
	m.writeProblem(w, probFailed, message, code)
}

func (m *middleware) problem(w http.ResponseWriter, k problemKind, detail string) {
	m.writeProblem(w, k, detail, "")
}

func (m *middleware) writeProblem(w http.ResponseWriter, k problemKind, detail, code string) {
	name, status, title, retryAfter := k.info()
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: m.cfg.problemBase + name, Title: title, Status: status, Detail: detail, Code: code})
}
