// Command quickstart shows idem's runtime on the embedded memory store: a
// charge that runs once however often it is retried, a duplicate that
// arrives while the first call is in flight, a key reused with another
// payload, and a gateway timeout that leaves the outcome UNKNOWN until a
// query converges it.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
)

// ChargeRequest is what a client sends; the idempotency key travels with it.
type ChargeRequest struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// Receipt is what the gateway returns.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Cents    int64  `json:"cents"`
}

// gateway is a payment gateway that charges cards: the effect to run once.
type gateway struct {
	charges  atomic.Int64
	mu       sync.Mutex
	byKey    map[string]Receipt // what the gateway knows, by downstream key
	slowNext atomic.Bool
}

func (g *gateway) Charge(ctx context.Context, r ChargeRequest) (Receipt, error) {
	dk, _ := runtime.DownstreamKeyFrom(ctx) // the same on every attempt
	n := g.charges.Add(1)
	rc := Receipt{ChargeID: fmt.Sprintf("ch_%03d", n), Cents: r.Cents}
	g.mu.Lock()
	g.byKey[dk] = rc
	g.mu.Unlock()
	if g.slowNext.Swap(false) {
		// The charge went through, but the answer is lost in the network.
		ctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		<-ctx.Done()
		return Receipt{}, fmt.Errorf("gateway: reading response: %w", ctx.Err())
	}
	time.Sleep(50 * time.Millisecond) // a real gateway takes a while
	return rc, nil
}

// Find answers "did this charge happen?" from the gateway's side.
func (g *gateway) Find(ctx context.Context, _ ChargeRequest) (Receipt, runtime.Outcome, error) {
	dk, _ := runtime.DownstreamKeyFrom(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	if rc, ok := g.byKey[dk]; ok {
		return rc, runtime.OutcomeSucceeded, nil
	}
	return Receipt{}, runtime.OutcomeNotHappened, nil
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	rt, err := runtime.New(memstore.New(), runtime.WithMaxWait(time.Second))
	if err != nil {
		return err
	}
	gw := &gateway{byKey: make(map[string]Receipt)}
	ctx = runtime.WithScope(ctx, "tenant-acme") // from the authenticated caller
	charge := func(key string, req ChargeRequest) (Receipt, error) {
		return runtime.Do(ctx, rt, runtime.Call[ChargeRequest, Receipt]{
			Operation: "Payments.Charge", Key: key, Request: req,
			Effect: gw.Charge, Query: gw.Find,
		})
	}
	var outMu sync.Mutex
	show := func(what string, rc Receipt, err error) {
		outMu.Lock()
		defer outMu.Unlock()
		if err != nil {
			fmt.Fprintf(out, "%-44s -> error: %v\n", what, err)
			return
		}
		fmt.Fprintf(out, "%-44s -> %s (%d cents)\n", what, rc.ChargeID, rc.Cents)
	}

	req := ChargeRequest{Account: "acct_1", Cents: 1999}
	rc, err := charge("key-1", req)
	show("charge key-1", rc, err)
	rc, err = charge("key-1", req)
	show("retry key-1 (replayed, not charged again)", rc, err)

	// Three duplicates at once: one runs, the others wait for its result.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := charge("key-2", req)
			show(fmt.Sprintf("concurrent duplicate %d of key-2", i+1), rc, err)
		}()
	}
	wg.Wait()

	_, err = charge("key-1", ChargeRequest{Account: "acct_1", Cents: 5})
	show("key-1 with another amount", Receipt{}, err)
	if !errors.Is(err, runtime.ErrKeyReused) {
		return fmt.Errorf("key reuse was not rejected: %v", err)
	}

	gw.slowNext.Store(true)
	_, err = charge("key-3", req)
	show("charge key-3 (gateway times out)", Receipt{}, err)
	if !errors.Is(err, runtime.ErrOutcomeUnknown) {
		return fmt.Errorf("timeout did not leave the outcome unknown: %v", err)
	}
	rc, err = charge("key-3", req)
	show("retry key-3 (query finds the charge)", rc, err)

	fmt.Fprintf(out, "\n%d requests, %d charges at the gateway\n", 9, gw.charges.Load())
	if gw.charges.Load() != 3 {
		return fmt.Errorf("the gateway charged %d times, want 3", gw.charges.Load())
	}
	return nil
}
