package otelidem_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/otelidem"
)

func TestObserverRecordsEventsAndPhases(t *testing.T) {
	reader, rt := observed(t)
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

func TestOperationLabel(t *testing.T) {
	for _, tc := range []struct{ op, want string }{
		{"Payments.Charge", "Payments.Charge"},
		{"Svc Charge at checkout", "Svc Charge at checkout"},
		{"Charge as sent", "Charge as sent"},
		{"POST /v1/charges at stripe", "POST /v1/charges at stripe"}, // runtime.Do's: "at" no path
		{"POST /v1/charges at /eu now", "POST /v1/charges at /eu now"},
		{"POST /pay%20at%20/eu", "POST /pay%20at%20/eu"}, // a pinned pattern with spaces
		{"/pkg.Svc/Method", "/pkg.Svc/Method"},
		{"post api.example/charges/c7 as sent via /", "_OTHER (as sent) via /"},
		{"M-SEARCH api.example/x as sent", "_OTHER (as sent)"},
		{"post /pay at /x/pay", "_OTHER /pay (rewritten)"},
		{"post /charges/{id}", "post /charges/{id}"}, // pinned
		{"POST /charges/{id}", "POST /charges/{id}"},
		{"POST a.example/pay", "POST a.example/pay"},
		{"POST api.example/charges/c1 as sent", "POST (as sent)"},
		{"POST api.example/charges/c1 as sent via /", "POST (as sent) via /"},
		{"PUT a.example/x/y as sent via /api/", "PUT (as sent) via /api/"},
		{"POST /pay at /tenants/a/pay", "POST /pay (rewritten)"},
		{"POST api.example/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…#sha256:0123", "POST (long name)"},
		// Review r44: digests whose first 64 bytes end in the Host or in
		// the method, and the asterisk form, were kept whole.
		{"POST payments-api-gateway.payments-production.svc.cluster.loca…#sha256:0123", "POST (long name)"},
		{"X-MMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMM…#sha256:0123", "_OTHER (long name)"},
		{"POST h0.example* as sent", "POST (as sent)"},
		{"/pkg.Svc/VeryLongMethodNameeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee…#sha256:0123", "/pkg.Svc/VeryLongMethodNameeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee…#sha256:0123"},
		{"Charge* as sent", "Charge* as sent"},
	} {
		if got := otelidem.OperationLabel(tc.op); got != tc.want {
			t.Errorf("OperationLabel(%q) = %q, want %q", tc.op, got, tc.want)
		}
	}
}

// A route no pattern pins names each request's operation by what the
// client sent: the attribute must not get a value per request.
func TestOperationAttributeBounded(t *testing.T) {
	reader, rt := observed(t)
	h := idemhttp.Middleware(rt)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	mux := http.NewServeMux()
	mux.Handle("POST /charges/{id}", h)
	mux.Handle("/", h)
	for i := range 50 {
		for _, path := range []string{fmt.Sprintf("/charges/c%d", i), fmt.Sprintf("/orders/o%d", i)} {
			req := httptest.NewRequest(http.MethodPost, "http://api.example"+path, nil)
			req.Header.Set(idemhttp.DefaultHeader, fmt.Sprint("k", i))
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
			}
		}
	}
	// A client may send any method: lower-case, or one it invents.
	for i := range 20 {
		req := httptest.NewRequest(fmt.Sprint("m", i), "http://api.example/orders/x", nil)
		req.Header.Set(idemhttp.DefaultHeader, fmt.Sprint("m", i))
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("method %s: %d %s", req.Method, rec.Code, rec.Body)
		}
	}
	// Names cut to a digest whose first 64 bytes end in a long Host (a
	// Kubernetes service name with its port) or in a long method; and a
	// plain handler's request in asterisk form ("POST *"), by Host.
	// (Review r44: each took a value of its own.)
	for i := range 10 {
		for _, c := range []struct{ method, target string }{
			{http.MethodPost, "http://payments-api-gateway.payments-production.svc.cluster.local:8443/files/" + strings.Repeat("d", 200) + fmt.Sprint(i)},
			{"X-" + strings.Repeat("M", 70), "http://api.example/orders/" + strings.Repeat("o", 180) + fmt.Sprint(i)},
		} {
			req := httptest.NewRequest(c.method, c.target, nil)
			req.Header.Set(idemhttp.DefaultHeader, fmt.Sprint("long", i))
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				t.Fatalf("%s %s: %d %s", c.method, c.target, rec.Code, rec.Body)
			}
		}
		req := httptest.NewRequest(http.MethodPost, "*", nil)
		req.Host = fmt.Sprintf("h%d.example", i)
		req.Header.Set(idemhttp.DefaultHeader, fmt.Sprint("star", i))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("POST * to %s: %d %s", req.Host, rec.Code, rec.Body)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					if v, ok := dp.Attributes.Value("idem.operation"); ok {
						ops[v.AsString()] = true
					}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					if v, ok := dp.Attributes.Value("idem.operation"); ok {
						ops[v.AsString()] = true
					}
				}
			}
		}
	}
	want := map[string]bool{"POST /charges/{id}": true, "POST (as sent) via /": true, "_OTHER (as sent) via /": true,
		"POST (long name)": true, "_OTHER (long name)": true, "POST (as sent)": true}
	if !maps.Equal(ops, want) {
		t.Fatalf("idem.operation values %v, want %v", slices.Sorted(maps.Keys(ops)), slices.Sorted(maps.Keys(want)))
	}
}

// observed returns a runtime on a memory store whose observer records
// into reader.
func observed(t *testing.T) (*sdkmetric.ManualReader, *runtime.Runtime) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	obs, err := otelidem.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(memstore.New(), runtime.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	return reader, rt
}
