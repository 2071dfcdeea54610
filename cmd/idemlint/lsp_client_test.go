package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// lspBin is idemlint built once per test process, for every test that runs
// the binary (a build per test relinked the whole linter each time: about
// 1.6 s of CPU, 19 times).
var lspBin struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// idemlintBinary builds the idemlint binary on first use (with -race in a
// -race test binary) and returns its path.
func idemlintBinary(t *testing.T) string {
	t.Helper()
	lspBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "idemlint-lsp-test")
		if err != nil {
			lspBin.err = err
			return
		}
		lspBin.path = filepath.Join(dir, "idemlint")
		args := []string{"build", "-o", lspBin.path}
		// In a -race test binary the server is built with -race too, so
		// that the race detector checks the server's own goroutines
		// (analysis, debounce, cancellation), which run in that process,
		// not in the test binary.
		if testenv.Race() {
			args = append(args, "-race")
		}
		// The binary is built in the test binary's own mode, whatever
		// GOFLAGS TestMain gave the children.
		build := exec.Command("go", append(args, ".")...)
		build.Env = append(os.Environ(), "GOFLAGS=")
		lspBin.out, lspBin.err = build.CombinedOutput()
	})
	if lspBin.err != nil {
		t.Fatalf("go build: %v\n%s", lspBin.err, lspBin.out)
	}
	return lspBin.path
}

func TestMain(m *testing.M) {
	// Every go command the tests start, directly or through the idemlint
	// binary (the language server's go list -export, Neovim's server), runs
	// with testenv.ChildGoFlags: in scripts/test.sh it reads the packages go
	// vet -race compiled instead of compiling the standard library again.
	os.Setenv("GOFLAGS", testenv.ChildGoFlags())
	code := m.Run()
	if lspBin.path != "" {
		os.RemoveAll(filepath.Dir(lspBin.path))
	}
	os.Exit(code)
}

// rpcMsg is any message the server sends.
type rpcMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// lspClient drives `idemlint lsp` as an editor would, over its stdio.
type lspClient struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
	done   chan struct{} // closed when the process has exited
	exit   error

	mu     sync.Mutex
	cond   *sync.Cond
	msgs   []rpcMsg
	nextID int
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startLSP starts the server in dir; it is killed when the test ends if
// still running.
func startLSP(t *testing.T, dir string) *lspClient {
	t.Helper()
	c := &lspClient{t: t, stderr: &lockedBuffer{}, done: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.cmd = exec.Command(idemlintBinary(t), "lsp")
	c.cmd.Dir = dir
	c.cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go c.read(bufio.NewReader(stdout))
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Kill()
			<-c.done
		}
		if strings.Contains(c.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector reported a data race in the server:\n%s", c.stderr.String())
		} else if t.Failed() {
			t.Logf("server log:\n%s", c.stderr.String())
		}
	})
	return c
}

func (c *lspClient) read(r *bufio.Reader) {
	defer func() {
		c.exit = c.cmd.Wait()
		close(c.done)
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	for {
		length := -1
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSpace(line)
			if line == "" {
				break
			}
			if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
				length, _ = strconv.Atoi(v)
			}
		}
		body := make([]byte, length)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		var m rpcMsg
		if err := json.Unmarshal(body, &m); err != nil {
			c.t.Errorf("server sent invalid JSON %q: %v", body, err)
			return
		}
		c.mu.Lock()
		c.msgs = append(c.msgs, m)
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// raw writes bytes as they are.
func (c *lspClient) raw(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, s); err != nil {
		c.t.Fatalf("writing to the server: %v", err)
	}
}

func (c *lspClient) write(v any) {
	c.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.raw(fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(data), data))
}

// request sends a request and returns its ID.
func (c *lspClient) request(method string, params any) int {
	c.t.Helper()
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.mu.Unlock()
	c.write(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	return id
}

func (c *lspClient) notify(method string, params any) {
	c.t.Helper()
	c.write(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// mark is the number of messages received so far: wait from a mark sees
// only later ones.
func (c *lspClient) mark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

// wait returns the first message from index from on that matches, or
// fails the test after timeout.
func (c *lspClient) wait(from int, what string, match func(rpcMsg) bool) rpcMsg {
	c.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	timer := time.AfterFunc(time.Until(deadline), func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := from; ; {
		for ; i < len(c.msgs); i++ {
			if match(c.msgs[i]) {
				return c.msgs[i]
			}
		}
		select {
		case <-c.done:
			c.t.Fatalf("server exited (%v) before %s", c.exit, what)
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no %s after 90 s", what)
		}
		c.cond.Wait()
	}
}

// response waits for the answer to request id.
func (c *lspClient) response(id int) rpcMsg {
	c.t.Helper()
	want := strconv.Itoa(id)
	return c.wait(0, "answer to request "+want, func(m rpcMsg) bool { return m.Method == "" && string(m.ID) == want })
}

// call sends a request and waits for its answer.
func (c *lspClient) call(method string, params any) rpcMsg {
	c.t.Helper()
	return c.response(c.request(method, params))
}

type diagRange struct {
	Start struct{ Line, Character int } `json:"start"`
	End   struct{ Line, Character int } `json:"end"`
}

type lspDiag struct {
	Range           diagRange `json:"range"`
	Severity        int       `json:"severity"`
	Code            string    `json:"code"`
	Source          string    `json:"source"`
	Message         string    `json:"message"`
	CodeDescription *struct {
		Href string `json:"href"`
	} `json:"codeDescription"`
	RelatedInformation []struct {
		Location struct {
			URI   string    `json:"uri"`
			Range diagRange `json:"range"`
		} `json:"location"`
		Message string `json:"message"`
	} `json:"relatedInformation"`
}

type publishParams struct {
	URI         string    `json:"uri"`
	Diagnostics []lspDiag `json:"diagnostics"`
}

// diagnostics waits for a publication for path from index from on.
func (c *lspClient) diagnostics(from int, path string) []lspDiag {
	c.t.Helper()
	uri := fileURI(path)
	m := c.wait(from, "diagnostics for "+path, func(m rpcMsg) bool {
		if m.Method != "textDocument/publishDiagnostics" {
			return false
		}
		var p publishParams
		return json.Unmarshal(m.Params, &p) == nil && p.URI == uri
	})
	var p publishParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		c.t.Fatal(err)
	}
	return p.Diagnostics
}

// initialize runs the handshake with the given workspace folders.
func (c *lspClient) initialize(folders ...string) {
	c.t.Helper()
	var ws []map[string]string
	for _, f := range folders {
		ws = append(ws, map[string]string{"uri": fileURI(f), "name": filepath.Base(f)})
	}
	r := c.call("initialize", map[string]any{"processId": os.Getpid(), "rootUri": nil, "workspaceFolders": ws, "capabilities": map[string]any{}})
	if r.Error != nil {
		c.t.Fatalf("initialize: %+v", r.Error)
	}
	c.notify("initialized", map[string]any{})
}

func (c *lspClient) open(path string) {
	c.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	c.notify("textDocument/didOpen", map[string]any{"textDocument": map[string]any{"uri": fileURI(path), "languageId": "go", "version": 1, "text": string(data)}})
}

// shutdown runs shutdown and exit and checks the server exits with 0.
func (c *lspClient) shutdown() {
	c.t.Helper()
	if r := c.call("shutdown", nil); r.Error != nil || string(r.Result) != "null" {
		c.t.Fatalf("shutdown answered %s %+v", r.Result, r.Error)
	}
	c.notify("exit", nil)
	c.waitExit(0)
}

// waitExit waits for the process to exit with code.
func (c *lspClient) waitExit(code int) {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.t.Fatal("server still running 10 s after exit")
	}
	if got := c.cmd.ProcessState.ExitCode(); got != code {
		c.t.Fatalf("server exited with %d, want %d", got, code)
	}
}

func fileURI(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}
