package httpcompare

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

const body = `{"amount":1000,"currency":"eur"}`

// server is a base URL and the header the middleware reads.
type server struct {
	url    string
	header string
}

func netHTTP(b *testing.B, idem bool) server {
	b.Helper()
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d"}`, n.Add(1))
	})
	var h http.Handler = mux
	if idem {
		rt, err := runtime.New(memstore.New())
		if err != nil {
			b.Fatal(err)
		}
		h = idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux)
	}
	ln := listen(b)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return server{"http://" + ln.Addr().String(), idemhttp.DefaultHeader}
}

func fiberApp(b *testing.B, idem bool) server {
	b.Helper()
	var n atomic.Int64
	app := fiber.New()
	if idem {
		app.Use(idempotency.New()) // memory storage and lock, X-Idempotency-Key
	}
	app.Post("/charges", func(c fiber.Ctx) error {
		c.Set("Content-Type", "application/json")
		return c.Status(http.StatusCreated).SendString(fmt.Sprintf(`{"charge":"ch_%d"}`, n.Add(1)))
	})
	ln := listen(b)
	go func() { _ = app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
	b.Cleanup(func() { _ = app.Shutdown() })
	return server{"http://" + ln.Addr().String(), "X-Idempotency-Key"}
}

func listen(b *testing.B) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return ln
}

// uuidKey makes a 36-character key (fiber's default validation wants the
// length of a UUID).
func uuidKey(prefix string, i int64) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", prefix[0], i)
}

func run(b *testing.B, s server, key func(i int64) string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections) // before the server shuts down: fasthttp waits for open connections
	post := func(k string) {
		req, _ := http.NewRequest(http.MethodPost, s.url+"/charges", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if k != "" {
			req.Header.Set(s.header, k)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	post(key(0)) // warm up; for replays, store the record
	var i atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			post(key(i.Add(1)))
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

func noKey(int64) string                    { return "" }
func fresh(i int64) string                  { return uuidKey("f", i) }
func sameKey(_ int64) string                { return uuidKey("r", 0) }
func BenchmarkNetHTTP(b *testing.B)         { run(b, netHTTP(b, false), noKey) }
func BenchmarkIdemFirst(b *testing.B)       { run(b, netHTTP(b, true), fresh) }
func BenchmarkIdemReplay(b *testing.B)      { run(b, netHTTP(b, true), sameKey) }
func BenchmarkFiber(b *testing.B)           { run(b, fiberApp(b, false), noKey) }
func BenchmarkFiberIdemFirst(b *testing.B)  { run(b, fiberApp(b, true), fresh) }
func BenchmarkFiberIdemReplay(b *testing.B) { run(b, fiberApp(b, true), sameKey) }

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
