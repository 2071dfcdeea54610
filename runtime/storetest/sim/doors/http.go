package doors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
	"github.com/idemkit/idem/runtime/storetest/sim/doors/internal/simpay"
)

// httpDoor serves idemhttp behind a real http.Server on loopback, one per
// worker runtime, with Go 1.22 patterns, nested muxes and http.StripPrefix:
// two sub-muxes with the same inner pattern, "POST /{id}", mounted under
// /payments/ and /refunds/, the middleware around each handler. The same
// keys are sent to both (and the same bodies): their identities must not
// collide.
type httpDoor struct {
	r       *run
	servers []*http.Server
	addrs   []string
	client  *http.Client
	// layouts are the workers' layouts (see setup): 0 the route
	// placements alone, 1 with a per-process placement around them, 2 with
	// http.MaxBytesHandler between the two too.
	layouts []int
}

var httpRoutes = [2]string{"/payments/", "/refunds/"}

// httpAlias is a path prefix a rewrite in front of the placements takes
// off (see setup).
const httpAlias = "/v1"

// httpSpelling is how a delivery spells its request's URL, from a stream
// of its own (the rest of a seed's schedule stays as it was): bit 0 sends
// it under httpAlias, bit 1 percent-encodes the key's first character (an
// unreserved one, so the same resource), in upper- or lower-case hex by
// bit 2, and bit 3 upper-cases the Host. Every spelling is the same
// request: one identity, one effect.
func (h *httpDoor) httpSpelling(dl *delivery) int {
	return rand.New(rand.NewPCG(h.r.seed^0x5e11, uint64(dl.id))).IntN(16)
}

func (h *httpDoor) setup(r *run) error {
	h.r = r
	h.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// Route 0 has a query, on every worker and on the reconciler's runtime
	// (the middleware registers it there).
	query := idemhttp.Query(h.ops()[0], h.query, runtime.QueryOptions{})
	_ = idemhttp.Middleware(r.rrt, query)
	scope := idemhttp.Scope(func(req *http.Request) string {
		if t, err := strconv.Atoi(req.Header.Get("X-Sim-Tenant")); err == nil && t >= 0 && t < len(r.tenants) {
			return r.tenants[t]
		}
		return r.scope
	})
	// Each worker's layout, from a stream of its own (the rest of a seed's
	// schedule stays as it was): the route placements alone, or with a
	// per-process placement (a memory store) around the top mux, as
	// docs/http.md allows, with or without http.MaxBytesHandler between
	// the two. The outer one must record nothing for a request the route's
	// placement claims: what a client is told and what the shared record
	// says are checked as without it.
	lrng := rand.New(rand.NewPCG(r.seed, 0x4e57))
	for i, rt := range r.workers {
		layout := lrng.IntN(3)
		h.layouts = append(h.layouts, layout)
		mw := idemhttp.Middleware(rt, idemhttp.Logger(slog.New(&errorLog{r: r})), query, scope)
		sub := func(route int) http.Handler {
			m := http.NewServeMux()
			var rh http.Handler = mw(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { h.serve(w, req, route) }))
			if layout == 2 {
				rh = http.MaxBytesHandler(rh, 1<<20)
			}
			m.Handle("POST /{id}", rh)
			return m
		}
		mux := http.NewServeMux()
		for route, prefix := range httpRoutes {
			mux.Handle(prefix, http.StripPrefix(strings.TrimSuffix(prefix, "/"), sub(route)))
		}
		var outer http.Handler = mux
		if layout > 0 {
			local, err := runtime.New(memstore.New(), r.runtimeOptions(fmt.Sprintf("%s/w%d-local", r.scope, i), runtime.RecordUnknown)...)
			if err != nil {
				return err
			}
			outer = idemhttp.Middleware(local, idemhttp.Logger(slog.New(&errorLog{r: r})), scope)(mux)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		// The delivery's id, for the logger; and a rewrite in front of
		// every placement: /v1/payments/k is /payments/k (the rewrite
		// sets RequestURI to what it leaves, as docs/http.md asks).
		top := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if id, err := strconv.Atoi(req.Header.Get("X-Sim-Delivery")); err == nil {
				req = req.WithContext(context.WithValue(req.Context(), deliveryKey{}, id))
			}
			if rest, ok := strings.CutPrefix(req.URL.Path, httpAlias); ok {
				u := *req.URL
				u.Path, u.RawPath = rest, strings.TrimPrefix(u.RawPath, httpAlias)
				r2 := new(http.Request)
				*r2 = *req
				r2.URL, r2.RequestURI = &u, u.RequestURI()
				req = r2
			}
			outer.ServeHTTP(w, req)
		})
		srv := &http.Server{Handler: top, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
		go func() { _ = srv.Serve(lis) }()
		h.servers = append(h.servers, srv)
		h.addrs = append(h.addrs, "http://"+lis.Addr().String())
	}
	r.t.Logf("doors %s/http seed %d: worker layouts %v (0: the route placements alone; 1: a per-process placement around them; 2: and http.MaxBytesHandler between)", r.cfg.Name, r.seed, h.layouts)
	return nil
}

func (h *httpDoor) ops() [2]string { return [2]string{"POST /payments/{id}", "POST /refunds/{id}"} }

func (h *httpDoor) close() {
	for _, s := range h.servers {
		_ = s.Close()
	}
	h.client.CloseIdleConnections()
}

// serve is the route's handler.
func (h *httpDoor) serve(w http.ResponseWriter, req *http.Request, route int) {
	id, _ := strconv.Atoi(req.Header.Get("X-Sim-Delivery"))
	var in simpay.Request
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.Key != req.PathValue("id") {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	rc, err := h.r.handle(req.Context(), route, id, in)
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(rc)
	case errors.Is(err, errDeclined):
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = io.WriteString(w, failurePage())
	default:
		http.Error(w, "gateway timeout", http.StatusGatewayTimeout)
	}
}

// query is route 0's "did it happen?": the downstream's answer for the
// stored request, in the tenant the query's context names (as runtime.Do's
// query: r.query), as the response the handler would have written.
func (h *httpDoor) query(ctx context.Context, sr idemhttp.StoredRequest) (idemhttp.Response, runtime.Outcome, error) {
	var in simpay.Request
	if err := json.Unmarshal(sr.Body, &in); err != nil {
		return idemhttp.Response{}, runtime.OutcomeUnknown, fmt.Errorf("the stored body: %w", err)
	}
	// The stored target is the first delivery's, as it spelled it (see
	// httpSpelling).
	target, err := url.PathUnescape(sr.Target)
	if err != nil || sr.Method != http.MethodPost || target != httpRoutes[0]+in.Key {
		return idemhttp.Response{}, runtime.OutcomeUnknown, fmt.Errorf("the stored request %s %s is not the request of key %q", sr.Method, sr.Target, in.Key)
	}
	rc, out, err := h.r.query(0)(ctx, in)
	if err != nil {
		return idemhttp.Response{}, out, err
	}
	if out != runtime.OutcomeSucceeded {
		// A decline is a response too (402), as the handler answers it:
		// the downstream knows it declined.
		if h.r.declinedIn(ctx, 0, in.Key) {
			return idemhttp.Response{Status: http.StatusPaymentRequired, Header: http.Header{"Content-Type": {"text/html; charset=utf-8"}},
				Body: []byte(failurePage())}, runtime.OutcomeSucceeded, nil
		}
		return idemhttp.Response{}, out, nil
	}
	body, err := json.Marshal(rc)
	if err != nil {
		return idemhttp.Response{}, runtime.OutcomeUnknown, err
	}
	return idemhttp.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: append(body, '\n')}, out, nil
}

func (h *httpDoor) encodeSuccess(rc simpay.Receipt) ([]byte, error) {
	body, err := json.Marshal(rc)
	if err != nil {
		return nil, err
	}
	return json.Marshal(idemhttp.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: append(body, '\n')})
}

func (h *httpDoor) call(ctx context.Context, dl *delivery) answer {
	rq := dl.req
	body, _ := json.Marshal(rq.req)
	sp := h.httpSpelling(dl)
	path := httpRoutes[rq.route] + rq.key
	if sp&2 != 0 {
		hex := fmt.Sprintf("%%%02X", rq.key[0])
		if sp&4 != 0 {
			hex = strings.ToLower(hex)
		}
		path = httpRoutes[rq.route] + hex + rq.key[1:]
	}
	if sp&1 != 0 {
		path = httpAlias + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.addrs[dl.plan.worker]+path, bytes.NewReader(body))
	if err != nil {
		return answer{kind: ansOther, detail: err.Error()}
	}
	if sp&8 != 0 {
		req.Host = "LOCALHOST" + req.URL.Host[strings.LastIndexByte(req.URL.Host, ':'):]
	}
	req.Header.Set(idemhttp.DefaultHeader, rq.key)
	req.Header.Set("X-Sim-Delivery", strconv.Itoa(dl.id))
	req.Header.Set("X-Sim-Tenant", strconv.Itoa(rq.tenant))
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return answer{kind: ansDeadline, detail: err.Error()}
		}
		return answer{kind: ansOther, detail: err.Error()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return answer{kind: ansDeadline, detail: err.Error()}
		}
		return answer{kind: ansOther, detail: err.Error()}
	}
	detail := fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), short(string(b)))
	a := answer{detail: detail}
	switch resp.StatusCode {
	case http.StatusCreated:
		a.kind = ansSuccess
		if err := json.Unmarshal(b, &a.receipt); err != nil {
			a.kind, a.detail = ansOther, "undecodable 201: "+detail
		}
	case http.StatusPaymentRequired:
		a.kind = ansFailed
	case http.StatusGone:
		a.kind = ansNotStored
	case http.StatusConflict, http.StatusGatewayTimeout, http.StatusBadGateway, http.StatusInternalServerError, http.StatusTooManyRequests:
		a.kind = ansLater
	case 499:
		// The request's context ended while it waited (problem type
		// "canceled"): not this client's doing here (an outer placement's
		// lease rule, in a process stall, once answered so: now 409). Not
		// an outcome: the client retries.
		a.kind = ansLater
	case http.StatusUnprocessableEntity:
		// 422 is key reuse (problem type key-reused), or another stable
		// failure answer.
		a.kind = ansFailed
		if strings.Contains(string(b), "key-reused") {
			a.kind = ansKeyReused
		}
	case http.StatusServiceUnavailable:
		a.kind = ansLater
		if strings.Contains(string(b), "store-unavailable") {
			a.kind = ansOutage
		}
	default:
		// Any other stable answer the middleware gives a failed record.
		a.kind = ansFailed
		if resp.StatusCode < 400 {
			a.kind = ansOther
		}
	}
	return a
}

var _ = runtime.ErrPermanent
