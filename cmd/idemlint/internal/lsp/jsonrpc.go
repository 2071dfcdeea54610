package lsp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// JSON-RPC 2.0 error codes, and the LSP's own.
const (
	codeParseError           = -32700
	codeInvalidRequest       = -32600
	codeMethodNotFound       = -32601
	codeInvalidParams        = -32602
	codeInternalError        = -32603
	codeServerNotInitialized = -32002
	codeRequestCancelled     = -32800
)

// maxMessage bounds a message's Content-Length: a larger one is taken for
// a corrupt header, not allocated.
const maxMessage = 64 << 20

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// message is any JSON-RPC message as read: a request (ID and Method), a
// notification (Method only) or a response (ID, Result or Error).
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// framingError is a message that could not be read; the reader has
// skipped it and reading can go on. It is answered with a ParseError.
type framingError struct{ msg string }

func (e *framingError) Error() string { return e.msg }

// reader reads Content-Length framed messages (the LSP base protocol).
type reader struct {
	r *bufio.Reader
}

func newReader(r io.Reader) *reader { return &reader{r: bufio.NewReaderSize(r, 64<<10)} }

// read returns the next message's body. A header or body that cannot be
// framed gives a *framingError after skipping to the next header; the end
// of the input gives io.EOF.
func (r *reader) read() ([]byte, error) {
	length := -1
	sawHeader := false
	for {
		line, err := r.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && (line != "" || sawHeader) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if !sawHeader {
				continue // blank lines between messages are tolerated
			}
			break
		}
		// A body shorter than its Content-Length said leaves its tail in
		// front of the next header (already answered with a ParseError):
		// resynchronize on that header.
		if i := strings.Index(strings.ToLower(line), "content-length:"); i > 0 {
			line = line[i:]
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue // not a header: skipped
		}
		sawHeader = true
		if strings.EqualFold(strings.TrimSpace(name), "content-length") {
			n, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || n < 0 || n > maxMessage {
				return nil, &framingError{fmt.Sprintf("invalid Content-Length %q", strings.TrimSpace(value))}
			}
			length = n
		}
	}
	if length < 0 {
		return nil, &framingError{"message without a Content-Length header"}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r.r, body); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	return r.check(body, length)
}

// check returns body if it is one JSON value. A Content-Length longer than
// the message swallows the start of the next one: the next message is put
// back and the error names the length.
func (r *reader) check(body []byte, length int) ([]byte, error) {
	if json.Valid(body) {
		return body, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var v json.RawMessage
	if err := dec.Decode(&v); err == nil {
		// One whole value and more bytes: the more are the start of the
		// next message, put back in front of the stream.
		n := int(dec.InputOffset())
		rest := append([]byte(nil), body[n:]...)
		r.r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rest), r.r), 64<<10)
		return nil, &framingError{fmt.Sprintf("Content-Length %d is longer than the message (%d bytes)", length, n)}
	}
	var serr *json.SyntaxError
	if err := json.Unmarshal(body, &v); errors.As(err, &serr) {
		return nil, &framingError{fmt.Sprintf("malformed JSON at byte %d of %d: %v", serr.Offset, length, err)}
	} else if err != nil {
		return nil, &framingError{fmt.Sprintf("malformed JSON in a message of %d bytes: %v", length, err)}
	}
	return nil, &framingError{fmt.Sprintf("malformed JSON in a message of %d bytes", length)}
}

// writer writes framed messages, one at a time.
type writer struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *writer) write(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding a message: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := fmt.Fprintf(w.w, "Content-Length: %d\r\n\r\n", len(data)); err != nil {
		return err
	}
	_, err = w.w.Write(data)
	return err
}

// response is a successful answer; Result is written even when null.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result"`
}

// errorResponse is a failed answer; ID is null when the request's could
// not be read.
type errorResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   *rpcError       `json:"error"`
}

// notification is a message the server sends without an ID; request one
// with.
type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

type request struct {
	JSONRPC string `json:"jsonrpc"`
	ID      int    `json:"id"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}
