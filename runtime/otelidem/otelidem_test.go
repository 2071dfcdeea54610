package otelidem_test

import (
	"context"
	"errors"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/otelidem"
)

func TestObserverRecordsEventsAndPhases(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := otelidem.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(memstore.New(), runtime.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := runtime.Call[int, int]{Operation: "Svc.Op", Key: "k", Request: 1,
		Effect: func(context.Context, int) (int, error) { return 2, nil }}
	for range 3 {
		if _, err := runtime.Do(ctx, rt, call); err != nil {
			t.Fatal(err)
		}
	}
	call.Request = 9
	if _, err := runtime.Do(ctx, rt, call); !errors.Is(err, runtime.ErrKeyReused) {
		t.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	phases := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					ev, _ := dp.Attributes.Value("idem.event")
					counts[ev.AsString()] += dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					ph, _ := dp.Attributes.Value("idem.phase")
					phases[ph.AsString()] += dp.Count
				}
			}
		}
	}
	want := map[string]int64{"claimed": 1, "succeeded": 1, "replayed": 2, "key_reused": 1}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("idem.events{idem.event=%s} = %d, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
	if phases["claim"] != 4 || phases["effect"] != 1 || phases["complete"] != 1 {
		t.Errorf("phase histogram counts = %v, want claim 4, effect 1, complete 1", phases)
	}
}
