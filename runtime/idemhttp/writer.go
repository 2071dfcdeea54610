package idemhttp

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// writer is the ResponseWriter the handler gets. It buffers the response for
// the record and hands it to the client once the handler returned, passes
// 1xx responses through at once (the final status is the one recorded), and
// switches to pass-through when the handler flushes or hijacks the
// connection: the response is then streamed, and recorded as such (status
// and headers only; duplicates get 410). It implements [http.Flusher],
// [http.Hijacker] and Unwrap, so [http.ResponseController] works through it.
//
// The body is buffered in a pooled buffer (see bufPool), which release
// gives back once the client got the response. mu guards it: a handler that
// writes after it returned (which net/http forbids) gets errReleased, and
// never reaches a buffer that another request took from the pool since.
type writer struct {
	w      http.ResponseWriter
	header http.Header
	// hinted are the header names sent with a 1xx response (copied to w's
	// header then): one the handler deleted since must not reach the final
	// response, which is exactly what is recorded.
	hinted      []string
	status      int
	wroteHeader bool
	// streamed: the status, headers and body so far went to w; what
	// follows goes straight through.
	streamed bool
	hijacked bool

	mu       sync.Mutex
	body     *[]byte // nil until the first byte, and once released
	released bool
	// done: the handler returned (set before its response is taken for
	// the record). From then on the writer's methods change nothing, so
	// the client gets what was recorded and a handler that kept its writer
	// never reaches the client's (which net/http recycles) nor another
	// request's: writes, flushes and hijacks fail with errReleased, a
	// status is ignored, and Header returns a map of its own.
	done atomic.Bool
}

// bufPool holds the buffers of recorded bodies (*[]byte, so that Put does
// not allocate). A buffer that grew past maxPooled is left to the garbage
// collector, so that one large response does not pin its memory.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooled = 64 << 10

// errReleased is what a write after the handler returned gets (from the
// moment its response is taken for the record).
var errReleased = errors.New("idemhttp: write to a ResponseWriter after its handler returned")

// reset readies w for a handler answering the client's writer cw.
func (w *writer) reset(cw http.ResponseWriter) {
	w.release()
	w.w, w.header, w.status, w.wroteHeader = cw, http.Header{}, http.StatusOK, false
	w.hinted = w.hinted[:0]
	w.streamed, w.hijacked = false, false
	w.mu.Lock()
	w.released = false
	w.done.Store(false)
	w.mu.Unlock()
}

// finish marks the handler returned (see done).
func (w *writer) finish() { w.done.Store(true) }

// bytes returns the body buffered so far; nil when there is none. The
// caller holds mu, or the handler has returned.
func (w *writer) bytes() []byte {
	if w.body == nil {
		return nil
	}
	return *w.body
}

// release gives the body's buffer back to the pool: the client has the
// response and the runtime has encoded its record. Writes after it fail.
func (w *writer) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.released = true
	putBuf(w.body)
	w.body = nil
}

// putBuf gives bp back to bufPool, unless it is nil or grew past maxPooled.
func putBuf(bp *[]byte) {
	if bp != nil && cap(*bp) <= maxPooled {
		*bp = (*bp)[:0]
		bufPool.Put(bp)
	}
}

func (w *writer) Header() http.Header {
	if w.done.Load() {
		return http.Header{}
	}
	return w.header
}

func (w *writer) WriteHeader(code int) {
	if w.done.Load() {
		return
	}
	w.writeHeader(code)
}

func (w *writer) writeHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http does
	}
	if w.wroteHeader {
		return
	}
	if code <= 199 && code != http.StatusSwitchingProtocols {
		w.finalHeader()
		for k := range w.header {
			w.hinted = append(w.hinted, k)
		}
		w.w.WriteHeader(code)
		return
	}
	w.status, w.wroteHeader = code, true
}

func (w *writer) Write(p []byte) (int, error) {
	if w.done.Load() {
		return 0, errReleased
	}
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK)
	}
	switch {
	case w.hijacked:
		return 0, http.ErrHijacked
	case !bodyAllowed(w.status):
		return 0, http.ErrBodyNotAllowed
	case w.streamed:
		return w.w.Write(p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.released || w.done.Load(): // again under mu: response takes the body under it
		return 0, errReleased
	case len(p) == 0:
		return 0, nil
	case w.body == nil:
		w.body = bufPool.Get().(*[]byte)
	}
	*w.body = append(*w.body, p...)
	return len(p), nil
}

// FlushError starts streaming: what was buffered goes to the client, and so
// does everything written after.
func (w *writer) FlushError() error {
	if w.done.Load() {
		return errReleased
	}
	if w.hijacked {
		return http.ErrHijacked
	}
	if err := w.stream(); err != nil {
		return err
	}
	return http.NewResponseController(w.w).Flush()
}

// Flush implements [http.Flusher] (see FlushError).
func (w *writer) Flush() { _ = w.FlushError() }

// Hijack hands the connection to the handler; the response counts as
// streamed.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.done.Load() {
		return nil, nil, errReleased
	}
	c, b, err := http.NewResponseController(w.w).Hijack()
	if err == nil {
		w.hijacked, w.streamed, w.wroteHeader = true, true, true
	}
	return c, b, err
}

// Unwrap returns the client's writer, for [http.ResponseController].
func (w *writer) Unwrap() http.ResponseWriter { return w.w }

func (w *writer) stream() error {
	if w.streamed {
		return nil
	}
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK)
	}
	w.streamed = true
	w.finalHeader()
	w.w.WriteHeader(w.status)
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if b := w.bytes(); len(b) > 0 {
		_, err = w.w.Write(b)
		*w.body = b[:0]
	}
	return err
}

// commit sends the buffered response to the client, or the trailers of a
// streamed one.
func (w *writer) commit() {
	switch {
	case w.hijacked:
		return
	case w.streamed:
		dst := w.w.Header()
		declared := map[string]bool{}
		for _, v := range w.header.Values("Trailer") {
			for n := range strings.SplitSeq(v, ",") {
				declared[http.CanonicalHeaderKey(strings.TrimSpace(n))] = true
			}
		}
		for k, vs := range w.header {
			if strings.HasPrefix(k, http.TrailerPrefix) || declared[http.CanonicalHeaderKey(k)] {
				dst[k] = vs
			}
		}
		return
	}
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK)
	}
	w.finalHeader()
	w.w.WriteHeader(w.status)
	w.mu.Lock()
	defer w.mu.Unlock()
	if b := w.bytes(); len(b) > 0 {
		_, _ = w.w.Write(b)
	}
}

// response is what is recorded: the headers that may be stored, and the
// body unless it was streamed. It shares the writer's header values and
// body, which nothing changes once the handler returned: the runtime
// encodes the response before the client's writer gets them.
func (w *writer) response(cfg *config) Response {
	h := w.header
	for k := range w.header {
		if !cfg.stored(http.CanonicalHeaderKey(k)) {
			h = nil // some are not stored: a map of those that are
			break
		}
	}
	if h == nil {
		h = http.Header{}
		for k, vs := range w.header {
			if cfg.stored(http.CanonicalHeaderKey(k)) {
				h[k] = vs
			}
		}
	}
	resp := Response{Status: w.status, Header: storedHeader(h), Streamed: w.streamed}
	w.mu.Lock()
	w.finish()
	if !w.streamed {
		resp.Body = w.bytes()
	}
	w.mu.Unlock()
	return resp
}

// finalHeader gives the client's writer the headers of the response about
// to be written (a 1xx or the final one): the handler's, less those it sent
// with an earlier 1xx and deleted since.
func (w *writer) finalHeader() {
	dst := w.w.Header()
	for _, k := range w.hinted {
		if _, ok := w.header[k]; !ok {
			delete(dst, k)
		}
	}
	copyHeader(dst, w.header)
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = vs
	}
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}
