// Package otelidem reports idem's runtime events as OpenTelemetry metrics.
// It lives in a package of its own so that programs without OpenTelemetry do
// not import it.
//
//	obs, err := otelidem.New(otel.GetMeterProvider())
//	rt, err := runtime.New(store, runtime.WithObserver(obs))
//
// Instruments:
//
//	idem.events           counter    attributes: idem.event, idem.operation, idem.state
//	idem.phase.duration   histogram  seconds; attributes: idem.phase, idem.operation
//	idem.swept            counter    records deleted by the sweeper
//
// idem.operation is the operation's name as [OperationLabel] gives it: the
// name itself, except where it holds what a client sent (idemhttp's names
// of routes no pattern pins, "POST api.example/charges/c1 as sent", its
// rewritten paths and its digests of long names), which would give the
// attribute a value per request. Set [WithOperationLabel] to label
// operations otherwise.
package otelidem

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemkit/idem/internal/idname"
	"github.com/idemkit/idem/runtime"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/idemkit/idem/runtime"

// Observer is a [runtime.Observer] recording OpenTelemetry metrics.
type Observer struct {
	events metric.Int64Counter
	phases metric.Float64Histogram
	swept  metric.Int64Counter
	label  func(operation string) string
}

var _ runtime.Observer = (*Observer)(nil)

// Option configures an [Observer].
type Option func(*Observer)

// WithOperationLabel sets the function that turns an operation's name into
// the idem.operation attribute (default [OperationLabel]). Its values
// should be few: each is a time series per instrument and attribute set.
func WithOperationLabel(label func(operation string) string) Option {
	return func(o *Observer) {
		if label != nil {
			o.label = label
		}
	}
}

// OperationLabel is the default idem.operation of an operation: its name,
// but for the names idemhttp makes of what a client sent. A route no
// pattern pins ("POST api.example/charges/c1 as sent via /") is labelled
// by its method and the pattern that routed it ("POST (as sent) via /");
// one whose path a middleware rewrote ("POST /pay at /x/pay") by the
// pattern ("POST /pay (rewritten)"); a name of idemhttp's cut to a digest
// ("…#sha256:") by its method ("POST (long name)", whatever the first 64
// bytes the digest keeps end in: the Host, the path or the method). In
// these labels a method other than net/http's nine is "_OTHER", as
// OpenTelemetry's HTTP conventions have it: a client may send any token.
// Every other name is its own label: runtime.Do's and idemgrpc's, and
// idemhttp's pinned routes (whose paths never hold a space). A pattern
// registered without a method ("/charges/{id}") names its route with the
// request's method, so its label takes a value per method a client sends:
// register patterns with their method, or label with
// [WithOperationLabel]. So does a sub-mux behind a prefix stripped per
// request from a path value (http.StripPrefix("/t/"+tenant, sub)), whose
// names keep the prefix as sent ("POST /t/acme/pay/{id}", one per
// tenant): label with [WithOperationLabel]. A name of runtime.Do's shaped exactly like one of
// the marked names above ("POST /x at /y", or holding the digests'
// marker) is labelled as one; [WithOperationLabel] labels otherwise.
func OperationLabel(operation string) string {
	if i := strings.Index(operation, idname.Marker); i >= 0 {
		// A digest keeps the name's first 64 bytes, which may end in the
		// Host, in the path or in the method itself.
		prefix := operation[:i]
		if method, _, ok := strings.Cut(prefix, " "); ok && token(method) {
			return knownMethod(method) + " (long name)"
		}
		if token(prefix) {
			return "_OTHER (long name)" // a method of 64 bytes or more
		}
		return operation
	}
	method, rest, ok := strings.Cut(operation, " ")
	if !ok || !token(method) {
		return operation
	}
	route, tail, _ := strings.Cut(rest, " ")
	// A route is a Host and a path, or a Host and "*" (a request in
	// asterisk form, "POST * HTTP/1.1", which net/http hands to a plain
	// handler but for OPTIONS).
	if !strings.Contains(route, "/") && !strings.HasSuffix(route, "*") {
		return operation
	}
	switch {
	case tail == "as sent":
		return knownMethod(method) + " (as sent)"
	case strings.HasPrefix(tail, "as sent via "):
		return knownMethod(method) + " (as sent) via " + strings.TrimPrefix(tail, "as sent via ")
	case strings.HasPrefix(tail, "at /") && !strings.Contains(tail[len("at "):], " "):
		return knownMethod(method) + " " + route + " (rewritten)"
	}
	return operation
}

// knownMethod returns m when it is one of net/http's method constants,
// else "_OTHER".
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// token reports whether s is an HTTP token (RFC 9110, 5.6.2): a method.
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// New returns an observer whose instruments come from mp.
func New(mp metric.MeterProvider, opts ...Option) (*Observer, error) {
	if mp == nil {
		return nil, fmt.Errorf("otelidem: meter provider is nil")
	}
	m := mp.Meter(ScopeName)
	events, err := m.Int64Counter("idem.events",
		metric.WithDescription("Idempotency runtime events: claims, replays, in-progress rejections, takeovers, outcomes, reconciliations, lease losses."))
	if err != nil {
		return nil, fmt.Errorf("otelidem: %w", err)
	}
	phases, err := m.Float64Histogram("idem.phase.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the phases of an idempotent call (claim, wait, effect, complete, query, reconcile, sweep)."))
	if err != nil {
		return nil, fmt.Errorf("otelidem: %w", err)
	}
	swept, err := m.Int64Counter("idem.swept", metric.WithDescription("Expired finished records deleted by the sweeper."))
	if err != nil {
		return nil, fmt.Errorf("otelidem: %w", err)
	}
	o := &Observer{events: events, phases: phases, swept: swept, label: OperationLabel}
	for _, opt := range opts {
		opt(o)
	}
	return o, nil
}

// Observe implements [runtime.Observer].
func (o *Observer) Observe(ctx context.Context, e runtime.Event) {
	switch e.Kind {
	case runtime.EventPhase:
		o.phases.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(
			attribute.String("idem.phase", string(e.Phase)),
			attribute.String("idem.operation", o.label(e.Operation))))
	case runtime.EventSwept:
		o.swept.Add(ctx, int64(e.Count))
	default:
		o.events.Add(ctx, 1, metric.WithAttributes(
			attribute.String("idem.event", e.Kind.String()),
			attribute.String("idem.operation", o.label(e.Operation)),
			attribute.String("idem.state", string(e.State))))
	}
}
