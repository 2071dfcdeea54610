package httpcompare

// The fiber column of docs/http.md's behaviour table, checked: what fiber
// v3's idempotency middleware (default config, memory storage) does in each
// scenario, beside idemhttp.

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
)

const key36 = "8e03978e-40d5-43e8-bc93-6894a57f9324"

type fiberServer struct {
	url  string
	runs atomic.Int32
}

func startFiber(t *testing.T, h func(c fiber.Ctx, n int32) error) *fiberServer {
	t.Helper()
	fs := &fiberServer{}
	app := fiber.New()
	app.Use(idempotency.New())
	app.Post("/*", func(c fiber.Ctx) error { return h(c, fs.runs.Add(1)) })
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		_ = app.ShutdownWithTimeout(time.Second)
	})
	fs.url = "http://" + ln.Addr().String()
	return fs
}

type got struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, url string, keys []string, body string) got {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for _, k := range keys {
		req.Header.Add("X-Idempotency-Key", k)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return got{resp.StatusCode, resp.Header, string(b)}
}

func created(c fiber.Ctx, n int32) error {
	c.Set("Set-Cookie", "session=first-client")
	return c.Status(http.StatusCreated).SendString("ch_" + string(rune('0'+n)))
}

func TestFiberBehaviour(t *testing.T) {
	t.Run("replay has no marker header", func(t *testing.T) {
		fs := startFiber(t, created)
		a, b := post(t, fs.url+"/c", []string{key36}, "{}"), post(t, fs.url+"/c", []string{key36}, "{}")
		if a.body != b.body || fs.runs.Load() != 1 || b.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("%v %v", a, b)
		}
	})
	t.Run("key reused with another body or path replays the first response", func(t *testing.T) {
		fs := startFiber(t, created)
		a := post(t, fs.url+"/c", []string{key36}, `{"cents":1}`)
		b := post(t, fs.url+"/other", []string{key36}, `{"cents":999}`)
		if b.status != http.StatusCreated || b.body != a.body || fs.runs.Load() != 1 {
			t.Fatalf("%v %v", a, b)
		}
	})
	t.Run("Set-Cookie replayed to the retrying client", func(t *testing.T) {
		fs := startFiber(t, created)
		post(t, fs.url+"/c", []string{key36}, "{}")
		if b := post(t, fs.url+"/c", []string{key36}, "{}"); b.header.Get("Set-Cookie") == "" {
			t.Fatalf("%v", b)
		}
	})
	t.Run("empty header runs unprotected", func(t *testing.T) {
		fs := startFiber(t, created)
		post(t, fs.url+"/c", []string{""}, "{}")
		post(t, fs.url+"/c", []string{""}, "{}")
		if fs.runs.Load() != 2 {
			t.Fatalf("runs %d", fs.runs.Load())
		}
	})
	t.Run("two fields: the first is used", func(t *testing.T) {
		fs := startFiber(t, created)
		a := post(t, fs.url+"/c", []string{key36, "x"}, "{}")
		if a.status != http.StatusCreated {
			t.Fatalf("%v", a)
		}
	})
	t.Run("invalid key is 500", func(t *testing.T) {
		fs := startFiber(t, created)
		if a := post(t, fs.url+"/c", []string{"short"}, "{}"); a.status != http.StatusInternalServerError {
			t.Fatalf("%v", a)
		}
	})
	t.Run("5xx stored and replayed", func(t *testing.T) {
		fs := startFiber(t, func(c fiber.Ctx, n int32) error { return c.Status(http.StatusServiceUnavailable).SendString("down") })
		post(t, fs.url+"/c", []string{key36}, "{}")
		if b := post(t, fs.url+"/c", []string{key36}, "{}"); b.status != http.StatusServiceUnavailable || fs.runs.Load() != 1 {
			t.Fatalf("%v runs %d", b, fs.runs.Load())
		}
	})
	t.Run("concurrent duplicate waits for the first, no 409", func(t *testing.T) {
		release := make(chan struct{})
		fs := startFiber(t, func(c fiber.Ctx, n int32) error { <-release; return created(c, n) })
		var wg sync.WaitGroup
		var a got
		wg.Go(func() { a = post(t, fs.url+"/c", []string{key36}, "{}") })
		for fs.runs.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		var b got
		wg.Go(func() { b = post(t, fs.url+"/c", []string{key36}, "{}") })
		time.Sleep(50 * time.Millisecond)
		close(release)
		wg.Wait()
		if a.body != b.body || b.status != http.StatusCreated || fs.runs.Load() != 1 {
			t.Fatalf("%v %v", a, b)
		}
	})
	t.Run("handler error: nothing stored, retry runs again", func(t *testing.T) {
		fs := startFiber(t, func(c fiber.Ctx, n int32) error {
			if n == 1 {
				return fiber.NewError(http.StatusBadGateway, "upstream")
			}
			return created(c, n)
		})
		post(t, fs.url+"/c", []string{key36}, "{}")
		if b := post(t, fs.url+"/c", []string{key36}, "{}"); b.status != http.StatusCreated || fs.runs.Load() != 2 {
			t.Fatalf("%v", b)
		}
	})
}
