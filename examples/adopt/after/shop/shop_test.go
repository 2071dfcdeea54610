package shop_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/examples/adopt/after/db"
	"github.com/idemkit/idem/examples/adopt/after/gateway"
	"github.com/idemkit/idem/examples/adopt/after/internal/psptest"
	"github.com/idemkit/idem/examples/adopt/after/shop"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// memQueries is db.Querier on a map.
type memQueries struct {
	mu     sync.Mutex
	orders map[string]db.Order
}

func (m *memQueries) GetOrder(_ context.Context, id string) (db.Order, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.orders[id]
	if !ok {
		return db.Order{}, pgx.ErrNoRows
	}
	return o, nil
}

func (m *memQueries) MarkOrderPaid(_ context.Context, arg db.MarkOrderPaidParams) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.orders[arg.ID]
	if !ok || o.Status != "pending" {
		return 0, nil
	}
	o.Status, o.ChargeID = "paid", arg.ChargeID
	m.orders[arg.ID] = o
	return 1, nil
}

// newShop wires the service as main does, on the memory store.
func newShop(t *testing.T, psp *psptest.PSP) (*httptest.Server, *memQueries, *runtime.Runtime) {
	q := &memQueries{orders: map[string]db.Order{
		"o-1": {ID: "o-1", CustomerID: "c-1", AmountCents: 1999, Currency: "EUR", Status: "pending"},
	}}
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	client := idemhttp.NewClient(&idemhttp.Transport{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	gw := &gateway.Client{BaseURL: psp.URL, HTTP: client}
	mux := http.NewServeMux()
	shop.NewService(q, shop.NewIdempotentPayments(shop.NewPayments(gw), rt)).Routes(mux)
	h := idemhttp.Middleware(rt, idemhttp.Required(true),
		idemhttp.Scope(func(r *http.Request) string { return r.Header.Get("X-Customer-ID") }))(mux)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, q, rt
}

// pay sends one payment request with key ("": a new one).
func pay(t *testing.T, srv *httptest.Server, customer, order, key string) (*http.Response, shop.Receipt) {
	t.Helper()
	if key == "" {
		key = idemhttp.NewKey()
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders/"+order+"/pay", strings.NewReader(""))
	req.Header.Set("X-Customer-ID", customer)
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rc shop.Receipt
	_ = json.NewDecoder(resp.Body).Decode(&rc)
	return resp, rc
}

func TestPay(t *testing.T) {
	for _, tt := range []struct {
		name string
		plan func(n int) psptest.Fault
	}{
		{"ok", nil},
		{"psp unavailable once", func(n int) psptest.Fault {
			if n == 1 {
				return psptest.Unavailable
			}
			return psptest.Pass
		}},
		// The PSP charged, its reply was lost: the transport retries with
		// the same key and the PSP replays the charge.
		{"psp reply lost once", func(n int) psptest.Fault {
			if n == 1 {
				return psptest.LostReply
			}
			return psptest.Pass
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			psp := psptest.New(t)
			psp.Plan = tt.plan
			srv, q, _ := newShop(t, psp)
			resp, rc := pay(t, srv, "c-1", "o-1", "")
			if resp.StatusCode != http.StatusOK || rc.ChargeID == "" {
				t.Fatalf("pay: %d %+v", resp.StatusCode, rc)
			}
			if o := q.orders["o-1"]; o.Status != "paid" || *o.ChargeID != rc.ChargeID {
				t.Fatalf("order %+v", o)
			}
			if n := psp.Charges("o-1"); n != 1 {
				t.Fatalf("%d charges", n)
			}
			if resp, _ := pay(t, srv, "c-1", "o-1", ""); resp.StatusCode != http.StatusConflict {
				t.Fatalf("paying a paid order: %d", resp.StatusCode)
			}
		})
	}
}

func TestPayNotYours(t *testing.T) {
	srv, _, _ := newShop(t, psptest.New(t))
	if resp, _ := pay(t, srv, "c-2", "o-1", ""); resp.StatusCode != http.StatusConflict {
		t.Fatalf("%d", resp.StatusCode)
	}
}

// The client retries its request with the same key: the answer is
// replayed, the card charged once.
func TestPayRetryReplays(t *testing.T) {
	psp := psptest.New(t)
	srv, _, _ := newShop(t, psp)
	first, rc1 := pay(t, srv, "c-1", "o-1", "k-1")
	again, rc2 := pay(t, srv, "c-1", "o-1", "k-1")
	if first.StatusCode != 200 || again.StatusCode != 200 || rc1 != rc2 || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %+v, again %d %+v %v", first.StatusCode, rc1, again.StatusCode, rc2, again.Header)
	}
	if n := psp.Charges("o-1"); n != 1 {
		t.Fatalf("%d charges", n)
	}
}

// Every reply of the PSP is lost: the charge's outcome is unknown and the
// client is told to retry later; the reconciler asks the PSP, finds the
// charge, and the client's retry gets it, the card charged once.
func TestPayUnknownReconciled(t *testing.T) {
	psp := psptest.New(t)
	psp.Plan = func(int) psptest.Fault { return psptest.LostReply }
	srv, q, rt := newShop(t, psp)
	if resp, _ := pay(t, srv, "c-1", "o-1", "k-1"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("pay with every reply lost: %d; want 503", resp.StatusCode)
	}
	psp.Plan = nil
	rec, err := runtime.NewReconciler(rt)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := rec.RunOnce(context.Background()); err != nil {
		t.Fatalf("reconciling: %+v %v", st, err)
	}
	resp, rc := pay(t, srv, "c-1", "o-1", "k-1")
	if resp.StatusCode != http.StatusOK || rc.ChargeID == "" || q.orders["o-1"].Status != "paid" {
		t.Fatalf("retry after reconciliation: %d %+v", resp.StatusCode, rc)
	}
	if n := psp.Charges("o-1"); n != 1 {
		t.Fatalf("%d charges", n)
	}
}
