package idemhttp

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"
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
	// snap is the header of the final response, fixed when the handler
	// wrote its status (net/http sends the map as it was then, and
	// ignores later changes but to trailers): what the client gets and
	// what is recorded. It holds copies of the values (net/http copies
	// them too: a value changed in place after the status is not sent),
	// in snapBuf and valBuf for a few headers, so that taking it
	// allocates nothing; snapped says it was taken.
	snap     []headerKV
	snapVals []string
	snapBuf  [4]headerKV
	valBuf   [8]string
	snapped  bool
	// streamed: the status, headers and body so far went to w; what
	// follows goes straight through.
	streamed bool
	hijacked bool
	// contentLength is the Content-Length the final status declared (-1:
	// none), written what the handler wrote of the body: as net/http, a
	// write past the declared length fails with http.ErrContentLength and
	// is not part of the response.
	contentLength, written int64

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
	w.snap, w.snapVals, w.snapped = w.snapBuf[:0], w.valBuf[:0], false
	w.hinted = w.hinted[:0]
	w.streamed, w.hijacked = false, false
	w.contentLength, w.written = -1, 0
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
		w.finalHeader(w.header)
		for k := range w.header {
			w.hinted = append(w.hinted, k)
		}
		w.w.WriteHeader(code)
		return
	}
	w.status, w.wroteHeader = code, true
	w.takeSnapshot()
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		}
	}
}

// headerKV is one header of a snapshot; isNil marks a value set to nil
// (suppressed the net/http way).
type headerKV struct {
	name  string
	vals  []string
	isNil bool
}

// takeSnapshot fixes the final response's header: the handler's map as
// it is now.
func (w *writer) takeSnapshot() {
	w.snap, w.snapVals = w.snap[:0], w.snapVals[:0]
	for k, vs := range w.header {
		start := len(w.snapVals)
		w.snapVals = append(w.snapVals, vs...)
		w.snap = append(w.snap, headerKV{name: k, vals: w.snapVals[start:len(w.snapVals):len(w.snapVals)], isNil: vs == nil})
	}
	w.snapped = true
}

// unchanged reports whether the handler's map holds what the snapshot
// holds.
func (w *writer) unchanged() bool {
	if len(w.header) != len(w.snap) {
		return false
	}
	for _, kv := range w.snap {
		vs, ok := w.header[kv.name]
		if !ok || (vs == nil) != kv.isNil || !slices.Equal(vs, kv.vals) {
			return false
		}
	}
	return true
}

// snapshot returns the final response's header as a map: the handler's
// own when it still holds the snapshot (no copy: the common case), else a
// map of the snapshot's values (the exchange's own: never reused by
// another request). Before any status (a hijacked connection) it is the
// handler's map.
func (w *writer) snapshot() http.Header {
	if !w.snapped || w.unchanged() {
		return w.header
	}
	h := make(http.Header, len(w.snap))
	for _, kv := range w.snap {
		if kv.isNil {
			h[kv.name] = nil
		} else {
			h[kv.name] = kv.vals
		}
	}
	return h
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
	}
	// Counted as net/http counts it, whether streamed or not: once a write
	// overran, every later one fails too.
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if w.streamed {
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
	w.finalHeader(w.snapshot())
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

// commit sends the buffered response to the client, then the trailers
// (those of a streamed one too): as net/http, the values the handler's
// map holds when it returned of the names its response declared in
// Trailer, and of the names with [http.TrailerPrefix]. The client's writer
// gets the header as it was at the status (with the prefixed names set by
// then), the body, then the trailers: so net/http decides, as for the
// handler alone, whether the response is chunked and a prefixed trailer
// set after the status goes (a small body is sent with a Content-Length,
// and such a trailer is then dropped, as net/http drops it).
func (w *writer) commit() {
	switch {
	case w.hijacked:
		return
	case !w.streamed:
		if !w.wroteHeader {
			w.writeHeader(http.StatusOK)
		}
		w.finalHeader(w.snapshot())
		w.w.WriteHeader(w.status)
		w.mu.Lock()
		if b := w.bytes(); len(b) > 0 {
			_, _ = w.w.Write(b)
		}
		w.mu.Unlock()
	}
	// The trailers are the handler's map's at return: one it deleted
	// since the status (copied to the client's map with the header then)
	// is not sent, as net/http alone would not send it.
	dst := w.w.Header()
	declared := trailers(w.snapshot())
	for k := range dst {
		if strings.HasPrefix(k, http.TrailerPrefix) || declared[http.CanonicalHeaderKey(k)] {
			if _, ok := w.header[k]; !ok {
				delete(dst, k)
			}
		}
	}
	w.prefixedTrailers()
	for k, vs := range w.header {
		if declared[http.CanonicalHeaderKey(k)] {
			dst[k] = vs
		}
	}
}

// prefixedTrailers gives the client's writer the handler's trailers named
// with [http.TrailerPrefix].
func (w *writer) prefixedTrailers() {
	for k, vs := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			w.w.Header()[k] = vs
		}
	}
}

// trailers returns the names h declares in Trailer (canonical) that
// net/http takes as trailers; nil when it declares none. A name RFC 9110
// forbids in a trailer (Content-Type, Cache-Control, Authorization...)
// is ignored by net/http's declaration, and sent as a header: so it is a
// header here, stored and replayed.
func trailers(h http.Header) map[string]bool {
	var declared map[string]bool
	for _, v := range h["Trailer"] {
		for n := range strings.SplitSeq(v, ",") {
			if n = strings.TrimSpace(n); n != "" && httpguts.ValidTrailerHeader(n) {
				if declared == nil {
					declared = map[string]bool{}
				}
				declared[http.CanonicalHeaderKey(n)] = true
			}
		}
	}
	return declared
}

// response is what is recorded: the headers of the final response that
// may be stored (never a trailer: a name its Trailer header declares, or
// one with http.TrailerPrefix), and the body unless it was streamed. It
// shares the writer's header values and body, which nothing changes once
// the handler returned: the runtime encodes the response before the
// client's writer gets them.
func (w *writer) response(cfg *config) Response {
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK) // the handler returned: its map is final
	}
	sent := w.snapshot()
	declared := trailers(sent)
	keep := func(k string) bool {
		ck := http.CanonicalHeaderKey(k)
		if ck == "Content-Length" && k != ck {
			// net/http does not read a Content-Length under another
			// spelling (it frames the body itself); replayed under the
			// canonical name it would refuse the body (review r48).
			return false
		}
		return cfg.stored(ck) && !declared[ck]
	}
	h := sent
	for k := range sent {
		if !keep(k) {
			h = nil // some are not stored: a map of those that are
			break
		}
	}
	if h == nil {
		h = http.Header{}
		for k, vs := range sent {
			if keep(k) {
				h[k] = vs
			}
		}
	}
	if _, typed := sent["Content-Type"]; !typed && len(sent["Transfer-Encoding"]) > 0 && bodyAllowed(w.status) {
		// net/http does not sniff a Content-Type for a response whose
		// handler set Transfer-Encoding, which is never stored: the
		// record says "no Content-Type" (a nil value, as net/http reads
		// one), so that a replay is not sniffed either (review r47).
		if len(h) == len(sent) { // h is sent itself (the handler's map): not to be changed
			h = maps.Clone(sent)
		}
		h["Content-Type"] = nil
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

// finalHeader gives the client's writer h, the headers of the response
// about to be written (a 1xx or the final one), less those the handler
// sent with an earlier 1xx and deleted since.
func (w *writer) finalHeader(h http.Header) {
	dst := w.w.Header()
	for _, k := range w.hinted {
		if _, ok := h[k]; !ok {
			delete(dst, k)
		}
	}
	copyHeader(dst, h)
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = vs
	}
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}
