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

	"github.com/idemkit/idem/examples/adopt/before/db"
	"github.com/idemkit/idem/examples/adopt/before/gateway"
	"github.com/idemkit/idem/examples/adopt/before/internal/psptest"
	"github.com/idemkit/idem/examples/adopt/before/shop"
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

func newShop(t *testing.T, psp *psptest.PSP) (*httptest.Server, *memQueries) {
	q := &memQueries{orders: map[string]db.Order{
		"o-1": {ID: "o-1", CustomerID: "c-1", AmountCents: 1999, Currency: "EUR", Status: "pending"},
	}}
	gw := &gateway.Client{BaseURL: psp.URL, HTTP: &http.Client{Timeout: 5 * time.Second}}
	mux := http.NewServeMux()
	shop.NewService(q, gw).Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, q
}

func pay(t *testing.T, srv *httptest.Server, customer, order string) (int, shop.Receipt) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders/"+order+"/pay", strings.NewReader(""))
	req.Header.Set("X-Customer-ID", customer)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rc shop.Receipt
	_ = json.NewDecoder(resp.Body).Decode(&rc)
	return resp.StatusCode, rc
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
	} {
		t.Run(tt.name, func(t *testing.T) {
			psp := psptest.New(t)
			psp.Plan = tt.plan
			srv, q := newShop(t, psp)
			status, rc := pay(t, srv, "c-1", "o-1")
			if status != http.StatusOK || rc.ChargeID == "" {
				t.Fatalf("pay: %d %+v", status, rc)
			}
			if o := q.orders["o-1"]; o.Status != "paid" || *o.ChargeID != rc.ChargeID {
				t.Fatalf("order %+v", o)
			}
			if n := psp.Charges("o-1"); n != 1 {
				t.Fatalf("%d charges", n)
			}
			if status, _ := pay(t, srv, "c-1", "o-1"); status != http.StatusConflict {
				t.Fatalf("paying a paid order: %d", status)
			}
		})
	}
}

func TestPayNotYours(t *testing.T) {
	srv, _ := newShop(t, psptest.New(t))
	if status, _ := pay(t, srv, "c-2", "o-1"); status != http.StatusConflict {
		t.Fatalf("%d", status)
	}
}
