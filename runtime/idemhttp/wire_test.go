package idemhttp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/teststores"
)

// rawPost sends a POST on a fresh connection and returns the response's
// header section as it came on the wire (less Date and the replay marker)
// and its body.
func rawPost(t *testing.T, addr, tenant, key string) (string, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /charges HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nX-Tenant: %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", key, tenant)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode <= 199 { // hints: the final answer is compared
		resp, err = http.ReadResponse(br, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Header.Del("Date")
	resp.Header.Del("Idempotent-Replayed")
	resp.Body = http.NoBody
	resp.ContentLength = -1
	resp.TransferEncoding = nil
	dump, err := httputil.DumpResponse(resp, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(dump), string(body)
}

// A replay is the original answer on the wire: header values with obs-text
// bytes (0x80-0xFF) come back as the same bytes, and a header suppressed the
// net/http way (Header()["Content-Type"] = nil) stays suppressed.
func TestReplayIsTheOriginalOnTheWire(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter){
		"obs-text": func(w http.ResponseWriter) {
			w.Header().Set("Content-Disposition", "attachment; filename=\"caf\xe9.txt\"")
			w.Header()["X-Mixed"] = []string{"plain", "\xff\x80\xa0"}
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "body")
		},
		"header deleted after 103": func(w http.ResponseWriter) {
			w.Header().Set("Link", "</style.css>; rel=preload; as=style")
			w.Header().Set("X-Hint-Only", "1")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("X-Hint-Only")
			w.Header().Set("X-Final", "1")
			w.WriteHeader(http.StatusCreated)
		},
		"suppressed Content-Type": func(w http.ResponseWriter) {
			w.Header()["Content-Type"] = nil
			_, _ = io.WriteString(w, "<html>sniffable</html>")
		},
	}
	for _, st := range teststores.All() {
		for name, h := range cases {
			t.Run(st.Name+"/"+name, func(t *testing.T) {
				hs := newHarness(t, st.New(t), nil, muxOf("POST /charges", func(w http.ResponseWriter, r *http.Request, n int32) { h(w) }))
				addr := strings.TrimPrefix(hs.URL, "http://")
				tenant := teststores.Unique()
				firstHead, firstBody := rawPost(t, addr, tenant, "k1")
				replayHead, replayBody := rawPost(t, addr, tenant, "k1")
				if replayHead != firstHead || replayBody != firstBody {
					t.Fatalf("the replay differs on the wire:\nfirst:  %q %q\nreplay: %q %q", firstHead, firstBody, replayHead, replayBody)
				}
				if n := hs.runs.Load(); n != 1 {
					t.Fatalf("handler ran %d times", n)
				}
			})
		}
	}
}
