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
package otelidem

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemkit/idem/runtime"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/idemkit/idem/runtime"

// Observer is a [runtime.Observer] recording OpenTelemetry metrics.
type Observer struct {
	events metric.Int64Counter
	phases metric.Float64Histogram
	swept  metric.Int64Counter
}

var _ runtime.Observer = (*Observer)(nil)

// New returns an observer whose instruments come from mp.
func New(mp metric.MeterProvider) (*Observer, error) {
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
	return &Observer{events: events, phases: phases, swept: swept}, nil
}

// Observe implements [runtime.Observer].
func (o *Observer) Observe(ctx context.Context, e runtime.Event) {
	switch e.Kind {
	case runtime.EventPhase:
		o.phases.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(
			attribute.String("idem.phase", string(e.Phase)),
			attribute.String("idem.operation", e.Operation)))
	case runtime.EventSwept:
		o.swept.Add(ctx, int64(e.Count))
	default:
		o.events.Add(ctx, 1, metric.WithAttributes(
			attribute.String("idem.event", e.Kind.String()),
			attribute.String("idem.operation", e.Operation),
			attribute.String("idem.state", string(e.State))))
	}
}
