package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Gateway is a fake in-process payment gateway. It charges cards once per
// downstream key and takes Latency per call. Cards routed through a flaky
// network (setFlaky) sometimes time out: the charge happens but its
// response is lost, so the client sees a timeout although the money moved,
// the case that leaves an outcome UNKNOWN.
type Gateway struct {
	Latency time.Duration

	mu      sync.Mutex
	calls   int
	charges int
	byKey   map[string]ChargeReceipt
	slow    map[string]time.Duration // extra latency by card
	flaky   map[string]int           // responses still to drop, by card
}

// NewGateway returns a gateway with no charges.
func NewGateway(latency time.Duration) *Gateway {
	return &Gateway{Latency: latency, byKey: map[string]ChargeReceipt{}, slow: map[string]time.Duration{}, flaky: map[string]int{}}
}

// timeoutError is what a client library returns when the response does not
// arrive in time; like net.Error it has Timeout() bool.
type timeoutError struct{ op string }

func (e timeoutError) Error() string { return e.op + ": i/o timeout" }
func (e timeoutError) Timeout() bool { return true }

// Charge charges req once per downstream key.
func (g *Gateway) Charge(ctx context.Context, downstreamKey string, req ChargeRequest) (ChargeReceipt, error) {
	g.mu.Lock()
	g.calls++
	delay := g.Latency + g.slow[req.Card]
	rc, dup := g.byKey[downstreamKey]
	if !dup {
		g.charges++
		rc = ChargeReceipt{ChargeID: fmt.Sprintf("ch_%03d", g.charges), Cents: req.Cents, Currency: req.Currency}
		g.byKey[downstreamKey] = rc
	}
	drop := g.flaky[req.Card] > 0
	if drop {
		g.flaky[req.Card]--
	}
	g.mu.Unlock()

	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ChargeReceipt{}, fmt.Errorf("gateway: %w", context.Cause(ctx))
	case <-t.C:
	}
	if drop {
		return ChargeReceipt{}, fmt.Errorf("gateway: POST /charges: %w", timeoutError{op: "read"})
	}
	return rc, nil
}

// Lookup finds the charge made with a downstream key.
func (g *Gateway) Lookup(downstreamKey string) (ChargeReceipt, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rc, ok := g.byKey[downstreamKey]
	return rc, ok
}

// Stats returns how often Charge was called and how many charges happened.
func (g *Gateway) Stats() (calls, charges int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls, g.charges
}

// setFlaky makes the gateway lose the next n responses to charges of card.
func (g *Gateway) setFlaky(card string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.flaky[card] = n
}

// setSlow makes charges of card take extra time.
func (g *Gateway) setSlow(card string, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.slow[card] = d
}

// waitCalls waits until Charge was called n times.
func (g *Gateway) waitCalls(ctx context.Context, n int) error {
	for {
		if calls, _ := g.Stats(); calls >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}
