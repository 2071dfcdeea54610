// Package bp holds bypass's cases: each positive case is followed by its
// must-not-flag twin.
package bp

import (
	"context"

	"bpimpl"
	"bpsvc"

	"github.com/idemkit/idem/runtime"
)

var req = bpsvc.ChargeRequest{IdempotencyKey: "k", Amount: 1}

// 1. A direct call on the concrete type.
func direct(ctx context.Context, s *bpimpl.Service) error {
	_, err := s.Charge(ctx, req) // want `\(\*bpimpl.Service\).Charge is called at bp\.go:18:12 on the concrete \*bpimpl.Service, which implements the //idem:service bpsvc.Payments: the call skips the generated wrapper bpsvc.NewIdempotentPayments`
	return err
}

func wrapped(ctx context.Context, s *bpimpl.Service, rt *runtime.Runtime) error {
	p := bpsvc.NewIdempotentPayments(s, rt)
	_, err := p.Charge(ctx, req)
	return err
}

// 2. The other op.
func refund(ctx context.Context, s *bpimpl.Service) error {
	_, err := s.Refund(ctx, req) // want `\(\*bpimpl.Service\).Refund is called at bp\.go:30:12 on the concrete`
	return err
}

// A //idem:skip method passes straight through anyway.
func find(ctx context.Context, s *bpimpl.Service) error {
	_, err := s.Find(ctx, req)
	return err
}

// 3. A value receiver.
func value(ctx context.Context) error {
	_, err := bpimpl.Value{}.Charge(ctx, req) // want `bpimpl.Value.Charge is called at bp\.go:42:12 on the concrete bpimpl.Value`
	return err
}

// Through the interface, whatever it holds.
func iface(ctx context.Context, p bpsvc.Payments) error {
	_, err := p.Charge(ctx, req)
	return err
}

// 4. A method value.
func methodValue(s *bpimpl.Service) func(context.Context, bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return s.Charge // want `the method value \(\*bpimpl.Service\).Charge is taken at bp\.go:54:9 from the concrete \*bpimpl.Service`
}

func methodValueWrapped(s *bpimpl.Service, rt *runtime.Runtime) func(context.Context, bpsvc.ChargeRequest) (bpsvc.Receipt, error) {
	return bpsvc.NewIdempotentPayments(s, rt).Charge
}

// 5. A method value passed as an argument.
func register(h func(context.Context, bpsvc.ChargeRequest) (bpsvc.Receipt, error)) {}

func passValue(s *bpimpl.Service) {
	register(s.Refund) // want `the method value \(\*bpimpl.Service\).Refund is taken at bp\.go:65:11 from the concrete`
}

func passSkip(s *bpimpl.Service) {
	register(s.Find)
}

// 6. A struct field of the concrete type.
type handler struct {
	svc  *bpimpl.Service
	pay  bpsvc.Payments
	book *bpimpl.Book
}

func (h *handler) serve(ctx context.Context) error {
	_, err := h.svc.Charge(ctx, req) // want `\(\*bpimpl.Service\).Charge is called at bp\.go:80:12 on the concrete`
	return err
}

func (h *handler) serveWrapped(ctx context.Context) error {
	_, err := h.pay.Charge(ctx, req)
	return err
}

// 7. A service whose wrapper was never generated: nothing to skip.
func (h *handler) post(ctx context.Context) error {
	_, err := h.book.Post(ctx, req)
	return err
}

// 8. Inside a closure.
func closure(ctx context.Context, s *bpimpl.Service) func() error {
	return func() error {
		_, err := s.Charge(ctx, req) // want `\(\*bpimpl.Service\).Charge is called at bp\.go:98:13 on the concrete`
		return err
	}
}

// A type that does not implement the service.
func gateway(ctx context.Context, g *bpimpl.Gateway) error {
	_, err := g.Charge(ctx, req)
	return err
}

// 9. Embedded in a local type: the promoted method is the inner one.
type decorated struct{ *bpimpl.Service }

func embedded(ctx context.Context, d decorated) error {
	_, err := d.Charge(ctx, req) // want `\(\*bpimpl.Service\).Charge is called at bp\.go:113:12 on the concrete bp.decorated`
	return err
}

// A method that is not in the interface.
func helper(s *bpimpl.Service) {
	s.Helper()
}

// 10. In a goroutine and a deferred call.
func async(ctx context.Context, s *bpimpl.Service) {
	go s.Charge(ctx, req)    // want `\(\*bpimpl.Service\).Charge is called at bp\.go:124:5 on the concrete`
	defer s.Refund(ctx, req) // want `\(\*bpimpl.Service\).Refund is called at bp\.go:125:8 on the concrete`
}

func asyncWrapped(ctx context.Context, p bpsvc.Payments) {
	go p.Charge(ctx, req)
	defer p.Refund(ctx, req)
}

// 11. Through an explicit dereference and a value of the pointer's type.
func deref(ctx context.Context, s *bpimpl.Service) error {
	_, err := (*s).Charge(ctx, req) // want `\(\*bpimpl.Service\).Charge is called at bp\.go:135:12 on the concrete`
	return err
}

func newValue(ctx context.Context) error {
	var s bpimpl.Service
	_, err := s.Charge(ctx, req) // want `\(\*bpimpl.Service\).Charge is called at bp\.go:141:12 on the concrete`
	return err
}

func suppressed(ctx context.Context, s *bpimpl.Service) error {
	//idemlint:ignore bypass the migration replays recorded requests, each once by construction
	_, err := s.Charge(ctx, req)
	return err
}

// 12. A directive without a reason suppresses nothing.
func noReason(ctx context.Context, s *bpimpl.Service) error {
	//idemlint:ignore bypass // want `idemlint:ignore bypass needs a reason`
	_, err := s.Refund(ctx, req) // want `\(\*bpimpl.Service\).Refund is called at bp\.go:154:12 on the concrete`
	return err
}
