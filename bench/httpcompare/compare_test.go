package httpcompare

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// poster sends the benchmark's request to one server.
type poster struct {
	s      server
	client *http.Client
}

func newPoster(b *testing.B, s server) *poster {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections) // before the server shuts down: fasthttp waits for open connections
	return &poster{s, client}
}

func (p *poster) post(k string) error {
	req, _ := http.NewRequest(http.MethodPost, p.s.url+"/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if k != "" {
		req.Header.Set(p.s.header, k)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func run(b *testing.B, s server, key func(i int64) string) {
	p := newPoster(b, s)
	if err := p.post(key(0)); err != nil { // warm up; for replays, store the record
		b.Fatal(err)
	}
	var i atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := p.post(key(i.Add(1))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// side is one of the six measured in BenchmarkSides.
type side struct {
	name string
	p    *poster
	key  func(i int64) string
}

// sideBlock is how many requests one side serves before the next side's
// turn: a few milliseconds, so that load from other processes, which drifts
// over seconds, hits every side alike.
const sideBlock = 64

// BenchmarkSides measures all six sides in one process, taking turns in
// blocks of sideBlock requests (the order rotates every turn), each side
// alone while it runs, 4 callers a core as the others. It reports each
// side's requests/s and the ratios of each middleware to its framework
// without it; b.N is the number of requests of each side.
func BenchmarkSides(b *testing.B) {
	sides := []side{
		{"nethttp", newPoster(b, netHTTP(b, false)), noKey},
		{"idem-first", newPoster(b, netHTTP(b, true)), fresh},
		{"idem-replay", newPoster(b, netHTTP(b, true)), sameKey},
		{"fiber", newPoster(b, fiberApp(b, false)), noKey},
		{"fiberidem-first", newPoster(b, fiberApp(b, true)), fresh},
		{"fiberidem-replay", newPoster(b, fiberApp(b, true)), sameKey},
	}
	for _, sd := range sides {
		if err := sd.p.post(sd.key(0)); err != nil { // warm up; for replays, store the record
			b.Fatalf("%s: %v", sd.name, err)
		}
	}
	callers := 4 * goruntime.GOMAXPROCS(0)
	ns := make([]time.Duration, len(sides))
	done := make([]int64, len(sides))
	var seq atomic.Int64
	b.ResetTimer()
	for turn := 0; done[0] < int64(b.N); turn++ {
		for j := range sides {
			k := (turn + j) % len(sides)
			sd := sides[k]
			n := min(sideBlock, int64(b.N)-done[k])
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			start := time.Now()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= n {
						if err := sd.p.post(sd.key(seq.Add(1))); err != nil {
							errs <- fmt.Errorf("%s: %w", sd.name, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			ns[k] += time.Since(start)
			done[k] += n
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
		}
	}
	b.StopTimer()
	rate := make([]float64, len(sides))
	for k, sd := range sides {
		rate[k] = float64(done[k]) / ns[k].Seconds()
		b.ReportMetric(rate[k], sd.name+"-req/s")
	}
	b.ReportMetric(rate[1]/rate[0], "idem-first/nethttp")
	b.ReportMetric(rate[2]/rate[0], "idem-replay/nethttp")
	b.ReportMetric(rate[4]/rate[3], "fiberidem-first/fiber")
	b.ReportMetric(rate[5]/rate[3], "fiberidem-replay/fiber")
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
