package lsp

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func frame(body string) string {
	return "Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestReader reads streams with bad frames between good ones: each bad
// frame is one framing error, and the good message after it is read whole.
func TestReader(t *testing.T) {
	const m1, m2 = `{"jsonrpc":"2.0","id":1,"method":"a"}`, `{"jsonrpc":"2.0","id":2,"method":"b"}`
	tests := []struct {
		name  string
		input string
		want  []string // a body, or "error: <substring>"
	}{
		{"two messages", frame(m1) + frame(m2), []string{m1, m2}},
		{"Content-Type and lower case", "content-length: " + itoa(len(m1)) + "\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + m1, []string{m1}},
		{"malformed JSON", frame(`{"jsonrpc":`) + frame(m2), []string{"error: malformed JSON", m2}},
		{"Content-Length too short", "Content-Length: 10\r\n\r\n" + m1 + frame(m2), []string{"error: malformed JSON", m2}},
		{"Content-Length too long", "Content-Length: " + itoa(len(m1)+5) + "\r\n\r\n" + m1 + frame(m2), []string{"error: longer than the message", m2}},
		{"Content-Length not a number", "Content-Length: ten\r\n\r\n" + m1 + frame(m2), []string{"error: invalid Content-Length", m2}},
		{"Content-Length too large", "Content-Length: 999999999999\r\n\r\n" + m1 + frame(m2), []string{"error: invalid Content-Length", m2}},
		{"no Content-Length", "Content-Type: x\r\n\r\n" + frame(m2), []string{"error: without a Content-Length", m2}},
		{"garbage before a header", "garbage\r\n" + frame(m1), []string{m1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReader(strings.NewReader(tt.input))
			for i, want := range tt.want {
				body, err := r.read()
				var ferr *framingError
				switch {
				case strings.HasPrefix(want, "error: "):
					if !errors.As(err, &ferr) || !strings.Contains(ferr.msg, strings.TrimPrefix(want, "error: ")) {
						t.Fatalf("read %d: got %q, %v; want a framing error with %q", i, body, err, want)
					}
				case err != nil || string(body) != want:
					t.Fatalf("read %d: got %q, %v; want %q", i, body, err, want)
				}
			}
			if body, err := r.read(); err != io.EOF {
				t.Fatalf("at the end: got %q, %v; want io.EOF", body, err)
			}
		})
	}
}

// TestReaderTruncated: a stream that ends inside a message is an
// unexpected EOF, not a message.
func TestReaderTruncated(t *testing.T) {
	for _, input := range []string{"Content-Length: 40\r\n\r\n{\"a\":", "Content-Length: 40\r\n"} {
		if _, err := newReader(strings.NewReader(input)).read(); err != io.ErrUnexpectedEOF {
			t.Errorf("%q: got %v, want io.ErrUnexpectedEOF", input, err)
		}
	}
}
