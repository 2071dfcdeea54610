package idemhttp_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

// A handler that keeps its writer and its request's body past its return
// (which net/http forbids) gets errors from them, and never reaches the
// pooled buffers the next requests took: their responses and bodies are
// their own.
func TestPooledBuffersAfterReturn(t *testing.T) {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	var keptW http.ResponseWriter
	var keptBody io.Reader
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		keptW, keptBody = w, r.Body
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(append([]byte("echo:"), b...))
	})
	h := idemhttp.Middleware(rt, idemhttp.Logger(slog.New(slog.DiscardHandler)))(mux)
	serve := func(key, body string) *sink {
		r, _ := http.NewRequest(http.MethodPost, "http://api.example/charges", strings.NewReader(body))
		r.RequestURI = "/charges"
		r.Header.Set(idemhttp.DefaultHeader, key)
		w := &bodySink{sink: sink{h: http.Header{}}}
		h.ServeHTTP(w, r)
		if want := "echo:" + body; w.status != http.StatusCreated || w.body.String() != want {
			t.Fatalf("%s: %d %q, want %q", key, w.status, w.body.String(), want)
		}
		return &w.sink
	}
	serve("k1", "first request's body")
	w1, b1 := keptW, keptBody
	serve("k2", "second")
	if n, err := w1.Write([]byte("LATE")); n != 0 || err == nil {
		t.Errorf("a write after the handler returned: %d, %v", n, err)
	}
	if n, err := b1.Read(make([]byte, 8)); n != 0 || !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("a read after the handler returned: %d, %v", n, err)
	}
	if n, err := io.Copy(io.Discard, b1); n != 0 || !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("a copy after the handler returned: %d, %v", n, err)
	}
	serve("k3", "third")
	// The replays are what was recorded, untouched by the late write.
	serve("k1", "first request's body")
	serve("k2", "second")
}

type bodySink struct {
	sink
	body bytes.Buffer
}

func (s *bodySink) Write(p []byte) (int, error) { return s.body.Write(p) }
