// Package psptest is a fake payment service provider for the shop's tests:
// a real HTTP server that deduplicates charges by Idempotency-Key (as PSPs
// do), looks them up by key, and injects faults.
package psptest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Fault is what the PSP does with the n-th charge request (1-based).
type Fault int

const (
	Pass        Fault = iota
	Unavailable       // 503, the charge not made
	LostReply         // the charge is made; the connection drops before the reply
)

// PSP is a fake PSP.
type PSP struct {
	*httptest.Server
	// Plan decides the fault of the n-th charge request; nil: none.
	Plan func(n int) Fault

	mu       sync.Mutex
	requests int
	byKey    map[string]charge
	byOrder  map[string]int
}

type charge struct {
	ID, Status, OrderID string
}

// New starts a PSP, closed when the test ends.
func New(t testing.TB) *PSP {
	p := &PSP{byKey: map[string]charge{}, byOrder: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", p.create)
	mux.HandleFunc("GET /v1/charges", p.find)
	p.Server = httptest.NewServer(mux)
	t.Cleanup(p.Close)
	return p
}

// Charges returns how many charges were made for an order.
func (p *PSP) Charges(orderID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byOrder[orderID]
}

func (p *PSP) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		OrderID string `json:"order_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.OrderID == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.requests++
	fault := Pass
	if p.Plan != nil {
		fault = p.Plan(p.requests)
	}
	if fault == Unavailable {
		p.mu.Unlock()
		w.Header().Set("Retry-After", "0")
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	ch, replay := p.byKey[key]
	if !replay {
		p.byOrder[req.OrderID]++
		ch = charge{ID: fmt.Sprintf("ch_%d", len(p.byKey)+1), Status: "succeeded", OrderID: req.OrderID}
		p.byKey[key] = ch
	}
	p.mu.Unlock()
	if fault == LostReply {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]string{"id": ch.ID, "status": ch.Status})
}

func (p *PSP) find(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	ch, ok := p.byKey[r.URL.Query().Get("idempotency_key")]
	p.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"id": ch.ID, "status": ch.Status})
}
