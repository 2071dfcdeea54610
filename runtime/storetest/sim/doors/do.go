package doors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/storetest/sim/doors/internal/simpay"
)

// doDoor calls runtime.Do: route 0 with a query, route 1 without.
type doDoor struct {
	r  *run
	op [2]string
}

func (d *doDoor) setup(r *run) error {
	d.r = r
	// Operation names of the run's own: its reconciler acquires only them
	// (the generated wrapper's names are fixed: see Doors).
	d.op = [2]string{"SimDoors.Do.Charge/" + r.scope, "SimDoors.Do.Refund/" + r.scope}
	return runtime.Register(r.rrt, d.op[0], r.query(0), runtime.QueryOptions{})
}

func (d *doDoor) ops() [2]string { return d.op }
func (d *doDoor) close()         {}

func (d *doDoor) encodeSuccess(rc simpay.Receipt) ([]byte, error) { return json.Marshal(rc) }

func (d *doDoor) call(ctx context.Context, dl *delivery) answer {
	r, rq := d.r, dl.req
	c := runtime.Call[simpay.Request, simpay.Receipt]{Operation: d.op[rq.route], Key: rq.key, Request: rq.req,
		Effect: func(ctx context.Context, req simpay.Request) (simpay.Receipt, error) {
			return r.handle(ctx, rq.route, dl.id, req)
		}}
	if rq.route == 0 {
		c.Query = r.query(0)
	}
	rc, err := runtime.Do(ctx, r.workers[dl.plan.worker], c)
	return classifyRuntime(ctx, rc, err)
}

// query is the downstream's "did it happen?" for route's operation: it
// answers from the ledger of the tenant its context's scope names, as a
// multi-tenant downstream does; a query that lost its scope (or got
// another's) answers "not happened", and the effect runs again.
func (r *run) query(route int) func(ctx context.Context, req simpay.Request) (simpay.Receipt, runtime.Outcome, error) {
	return func(ctx context.Context, req simpay.Request) (simpay.Receipt, runtime.Outcome, error) {
		tenant, ok := r.tenantOf(runtime.ScopeFrom(ctx))
		if !ok {
			return simpay.Receipt{}, runtime.OutcomeNotHappened, nil
		}
		ident := r.identIn(tenant, route, req.Key)
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, e := range r.ledger[ident] {
			if e.receipt.Amount == req.Amount {
				return e.receipt, runtime.OutcomeSucceeded, nil
			}
		}
		return simpay.Receipt{}, runtime.OutcomeNotHappened, nil
	}
}

// declinedIn reports whether the downstream declined key on route in the
// tenant ctx's scope names.
func (r *run) declinedIn(ctx context.Context, route int, key string) bool {
	tenant, ok := r.tenantOf(runtime.ScopeFrom(ctx))
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.declined[r.identIn(tenant, route, key)]
}

// classifyRuntime classifies what runtime.Do (or a generated wrapper)
// returned.
func classifyRuntime(ctx context.Context, rc simpay.Receipt, err error) answer {
	a := answer{receipt: rc}
	if err != nil {
		a.detail = err.Error()
	}
	switch {
	case err == nil:
		a.kind = ansSuccess
	case errors.Is(err, runtime.ErrNotRecorded):
		// The effect happened (it ran, or the query found it): the
		// response comes with the error, and the client uses it.
		a.kind = ansSuccess
	case errors.Is(err, runtime.ErrNotReplayable):
		a.kind = ansNotStored
	case errors.Is(err, runtime.ErrKeyReused):
		a.kind = ansKeyReused
	case errors.Is(err, runtime.ErrPermanent):
		a.kind = ansFailed
	case ctx.Err() != nil:
		a.kind = ansDeadline
	default:
		// In progress, outcome unknown, lease lost, the handler's own
		// timeout: the client does not know, and retries.
		a.kind = ansLater
	}
	return a
}

// genDoor calls the idemgen wrapper of simpay.Ledger: Charge has a query
// (Find), Refund has none.
type genDoor struct {
	r      *run
	ledger []simpay.Ledger
}

type deliveryKey struct{}

// service is the simpay.Ledger the generated wrapper wraps.
type service struct{ r *run }

func (s service) Charge(ctx context.Context, req simpay.Request) (simpay.Receipt, error) {
	id, _ := ctx.Value(deliveryKey{}).(int)
	return s.r.handle(ctx, 0, id, req)
}

func (s service) Refund(ctx context.Context, req simpay.Request) (simpay.Receipt, error) {
	id, _ := ctx.Value(deliveryKey{}).(int)
	return s.r.handle(ctx, 1, id, req)
}

func (s service) Find(ctx context.Context, req simpay.Request) (simpay.Receipt, runtime.Outcome, error) {
	return s.r.query(0)(ctx, req)
}

func (g *genDoor) setup(r *run) error {
	g.r = r
	for _, w := range r.workers {
		g.ledger = append(g.ledger, simpay.NewIdempotentLedger(service{r}, w))
	}
	// The reconciler's runtime gets the query registered the same way.
	_ = simpay.NewIdempotentLedger(service{r}, r.rrt)
	return nil
}

func (g *genDoor) ops() [2]string { return [2]string{"SimDoors.Charge", "SimDoors.Refund"} }
func (g *genDoor) close()         {}

func (g *genDoor) encodeSuccess(rc simpay.Receipt) ([]byte, error) { return json.Marshal(rc) }

func (g *genDoor) call(ctx context.Context, dl *delivery) answer {
	ctx = context.WithValue(ctx, deliveryKey{}, dl.id)
	l := g.ledger[dl.plan.worker]
	var rc simpay.Receipt
	var err error
	if dl.req.route == 0 {
		rc, err = l.Charge(ctx, dl.req.req)
	} else {
		rc, err = l.Refund(ctx, dl.req.req)
	}
	a := classifyRuntime(ctx, rc, err)
	if a.kind == ansOther {
		a.detail = fmt.Sprintf("%T: %s", err, strings.TrimSpace(a.detail))
	}
	return a
}
