package otelidem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/otelidem"
)

type r49Ops struct {
	mu  sync.Mutex
	ops map[string]bool
}

func (o *r49Ops) Observe(ctx context.Context, e runtime.Event) {
	o.mu.Lock()
	o.ops[e.Operation] = true
	o.mu.Unlock()
}

// go doc otelidem: "idem.operation is the operation's name as
// OperationLabel gives it: the name itself, except where it holds what a
// client sent (idemhttp's names of routes no pattern pins, ...), which
// would give the attribute a value per request."
func TestR49OperationLabelPerRequest(t *testing.T) {
	testenv.Within(t, 15*time.Second, func() {
		cases := map[string]http.Handler{
			"plain handler": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }),
			"subtree mux": func() http.Handler {
				m := http.NewServeMux()
				m.HandleFunc("/charges/", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
				return m
			}(),
		}
		for name, inner := range cases {
			obs := &r49Ops{ops: map[string]bool{}}
			rt, err := runtime.New(memstore.New(), runtime.WithObserver(obs))
			if err != nil {
				t.Error(err)
				return
			}
			h := idemhttp.Middleware(rt)(inner)
			for i, target := range []string{"http://api.example/charges/c1", "http://api.example/charges/c2", "http://other.example:8443/charges/x%2Fy", "http://api.example/charges/" + strings.Repeat("z", 300)} {
				for _, method := range []string{"POST", "PATCH", "FROB"} {
					req := httptest.NewRequest(method, target, strings.NewReader("{}"))
					req.Header.Set("Idempotency-Key", "k"+string(rune('a'+i)))
					h.ServeHTTP(httptest.NewRecorder(), req)
				}
			}
			labels := map[string]bool{}
			for op := range obs.ops {
				labels[otelidem.OperationLabel(op)] = true
			}
			t.Logf("%s: %d operations -> labels %v", name, len(obs.ops), labels)
			if len(labels) > 6 { // "(as sent)" and "(long name)" per method, as documented
				t.Errorf("%s: %d labels for 3 methods: a value per request (want at most 6)", name, len(labels))
			}
		}
	})
}
