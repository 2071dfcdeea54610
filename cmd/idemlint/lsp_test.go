package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/modtest"
	"github.com/idemkit/idem/internal/testenv"
)

// writeInto writes files (relative path -> content) under dir.
func writeInto(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLSPProtocol checks the answers to bad input and the life cycle: no
// crash, no hang, a JSON-RPC error where one is due.
func TestLSPProtocol(t *testing.T) {
	initParams := map[string]any{"processId": nil, "rootUri": nil, "capabilities": map[string]any{}}
	tests := []struct {
		name string
		run  func(t *testing.T, c *lspClient)
	}{
		{"request before initialize", func(t *testing.T, c *lspClient) {
			r := c.call("textDocument/codeAction", map[string]any{})
			if r.Error == nil || r.Error.Code != -32002 {
				t.Fatalf("got %s %+v, want error -32002 (server not initialized)", r.Result, r.Error)
			}
			c.notify("textDocument/didOpen", map[string]any{}) // dropped
			if r := c.call("initialize", initParams); r.Error != nil {
				t.Fatalf("initialize after the refused request: %+v", r.Error)
			}
			if r := c.call("initialize", initParams); r.Error == nil || r.Error.Code != -32600 {
				t.Fatalf("second initialize: got %+v, want -32600", r.Error)
			}
			c.shutdown()
		}},
		{"malformed JSON", func(t *testing.T, c *lspClient) {
			from := c.mark()
			c.raw("Content-Length: 12\r\n\r\n{\"jsonrpc\":2")
			r := c.wait(from, "parse error", func(m rpcMsg) bool { return m.Error != nil })
			if r.Error.Code != -32700 || string(r.ID) != "null" || !strings.Contains(r.Error.Message, "malformed JSON") {
				t.Fatalf("got id %s %+v, want a -32700 parse error with id null", r.ID, r.Error)
			}
			if r := c.call("initialize", initParams); r.Error != nil {
				t.Fatalf("initialize after malformed JSON: %+v", r.Error)
			}
			// Valid JSON that is no message object, and a wrong version.
			for _, body := range []string{`[1,2]`, `{"jsonrpc":"1.0","id":7,"method":"shutdown"}`} {
				from := c.mark()
				c.raw(fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body))
				if r := c.wait(from, "invalid request", func(m rpcMsg) bool { return m.Error != nil }); r.Error.Code != -32600 {
					t.Fatalf("%s: got %+v, want -32600", body, r.Error)
				}
			}
			c.shutdown()
		}},
		{"Content-Length too short", func(t *testing.T, c *lspClient) {
			body := `{"jsonrpc":"2.0","id":99,"method":"initialize","params":{}}`
			from := c.mark()
			c.raw(fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body)-20, body))
			if r := c.wait(from, "parse error", func(m rpcMsg) bool { return m.Error != nil }); r.Error.Code != -32700 {
				t.Fatalf("got %+v, want -32700", r.Error)
			}
			if r := c.call("initialize", initParams); r.Error != nil {
				t.Fatalf("initialize after a short Content-Length: %+v", r.Error)
			}
			c.shutdown()
		}},
		{"Content-Length too long", func(t *testing.T, c *lspClient) {
			body := `{"jsonrpc":"2.0","id":99,"method":"initialize","params":{}}`
			next := `{"jsonrpc":"2.0","id":100,"method":"initialize","params":{}}`
			from := c.mark()
			c.raw(fmt.Sprintf("Content-Length: %d\r\n\r\n%sContent-Length: %d\r\n\r\n%s", len(body)+30, body, len(next), next))
			r := c.wait(from, "parse error", func(m rpcMsg) bool { return m.Error != nil })
			if r.Error.Code != -32700 || !strings.Contains(r.Error.Message, "longer than the message") {
				t.Fatalf("got %+v, want -32700 naming the length", r.Error)
			}
			if r := c.response(100); r.Error != nil {
				t.Fatalf("the message after the long one: %+v", r.Error)
			}
			c.shutdown()
		}},
		{"unknown method", func(t *testing.T, c *lspClient) {
			c.call("initialize", initParams)
			c.notify("idemlint/noSuchNotification", map[string]any{})
			r := c.call("textDocument/hover", map[string]any{})
			if r.Error == nil || r.Error.Code != -32601 {
				t.Fatalf("got %s %+v, want -32601 (method not found)", r.Result, r.Error)
			}
			c.shutdown()
		}},
		{"file watchers registered", func(t *testing.T, c *lspClient) {
			from := c.mark()
			c.call("initialize", map[string]any{"processId": nil, "rootUri": nil, "capabilities": map[string]any{
				"workspace": map[string]any{"didChangeWatchedFiles": map[string]any{"dynamicRegistration": true}},
			}})
			c.notify("initialized", map[string]any{})
			r := c.wait(from, "client/registerCapability", func(m rpcMsg) bool { return m.Method == "client/registerCapability" })
			for _, glob := range []string{"**/*.go", "**/go.mod", "**/go.work", "**/.idemlint.json"} {
				if !strings.Contains(string(r.Params), glob) {
					t.Errorf("registration %s: no watcher for %s", r.Params, glob)
				}
			}
			c.write(map[string]any{"jsonrpc": "2.0", "id": r.ID, "result": nil})
			c.shutdown()
		}},
		{"request after shutdown", func(t *testing.T, c *lspClient) {
			c.call("initialize", initParams)
			c.call("shutdown", nil)
			if r := c.call("textDocument/codeAction", map[string]any{}); r.Error == nil || r.Error.Code != -32600 {
				t.Fatalf("got %+v, want -32600", r.Error)
			}
			c.notify("exit", nil)
			c.waitExit(0)
		}},
		{"exit without shutdown", func(t *testing.T, c *lspClient) {
			c.call("initialize", initParams)
			c.notify("exit", nil)
			c.waitExit(1)
		}},
		{"stdin closed", func(t *testing.T, c *lspClient) {
			c.call("initialize", initParams)
			c.stdin.Close()
			c.waitExit(1)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, startLSP(t, t.TempDir()))
		})
	}
}

const lspTypeError = `package broken

// F does not type-check.
func F() int { return "one" }
`

const lspClean = `package clean

// Sum adds.
func Sum(a, b int) int { return a + b }
`

// TestLSPDiagnostics opens files of two modules (two workspace folders) and
// checks what is published, then changes files as an editor and git do.
func TestLSPDiagnostics(t *testing.T) {
	a, b, outside := t.TempDir(), t.TempDir(), t.TempDir()
	writeInto(t, a, map[string]string{
		"go.mod":           "module example.com/shop\n\ngo 1.26\n",
		"shop/shop.go":     bad,
		"broken/broken.go": lspTypeError,
		"clean/clean.go":   lspClean,
	})
	writeInto(t, b, map[string]string{
		"go.mod":     "module example.com/pay\n\ngo 1.26\n",
		"pay/pay.go": strings.Replace(bad, "package shop", "package pay", 1),
	})
	writeInto(t, outside, map[string]string{"loose.go": "package loose\n"})
	shop, broken, clean, pay := filepath.Join(a, "shop/shop.go"), filepath.Join(a, "broken/broken.go"), filepath.Join(a, "clean/clean.go"), filepath.Join(b, "pay/pay.go")

	c := startLSP(t, t.TempDir())
	c.initialize(a, b)
	from := c.mark()
	for _, f := range []string{shop, broken, clean, pay} {
		c.open(f)
	}
	// $/cancelRequest: a code action waits for the analysis under way;
	// cancelled, it answers RequestCancelled.
	id := c.request("textDocument/codeAction", map[string]any{
		"textDocument": map[string]any{"uri": fileURI(shop)},
		"range":        map[string]any{"start": map[string]int{"line": 0, "character": 0}, "end": map[string]int{"line": 40, "character": 0}},
		"context":      map[string]any{"diagnostics": []any{}},
	})
	c.notify("$/cancelRequest", map[string]any{"id": id})
	if r := c.response(id); r.Error == nil || r.Error.Code != -32800 {
		t.Errorf("cancelled code action: got %s %+v, want error -32800", r.Result, r.Error)
	}

	ds := c.diagnostics(from, shop)
	byRule := map[string]lspDiag{}
	for _, d := range ds {
		byRule[d.Code] = d
	}
	tx, ok := byRule["txrpc"]
	if !ok || len(ds) != 2 {
		t.Fatalf("shop.go: got %+v, want txrpc and timeoutfail", ds)
	}
	// The whole call notify(ctx, id) at 19:12-19:27 (1-based, bytes).
	if tx.Range.Start.Line != 18 || tx.Range.Start.Character != 11 || tx.Range.End.Line != 18 || tx.Range.End.Character != 26 {
		t.Errorf("txrpc range %+v, want 18:11-18:26", tx.Range)
	}
	if tx.Severity != 2 || tx.Source != "idemlint" || tx.CodeDescription == nil || !strings.Contains(tx.CodeDescription.Href, "txrpc") {
		t.Errorf("txrpc: severity %d source %q description %+v", tx.Severity, tx.Source, tx.CodeDescription)
	}
	first, rest, _ := strings.Cut(tx.Message, "\n")
	if len(first) > 80 || !strings.Contains(rest, "while the database transaction begun at shop.go:11:13 is open") {
		t.Errorf("txrpc message %q: want a short first line, then the CLI's message", tx.Message)
	}
	var related []string
	for _, r := range tx.RelatedInformation {
		related = append(related, fmt.Sprintf("%s:%d: %s", filepath.Base(r.Location.URI), r.Location.Range.Start.Line+1, r.Message))
	}
	if want := "shop.go:11: transaction begun here|shop.go:30: leaf network call: (*http.Client).Do"; strings.Join(related, "|") != want {
		t.Errorf("txrpc related %q, want %q", related, want)
	}
	if ds := c.diagnostics(from, clean); len(ds) != 0 {
		t.Errorf("clean.go: got %+v, want an empty list", ds)
	}
	if ds := c.diagnostics(from, broken); len(ds) != 1 || ds[0].Severity != 1 || ds[0].Range.Start.Line != 3 || !strings.Contains(ds[0].Message, "cannot use") {
		t.Errorf("broken.go: got %+v, want one error at line 4 (the type error)", ds)
	}
	if ds := c.diagnostics(from, pay); len(ds) != 2 {
		t.Errorf("pay.go (second folder): got %+v, want txrpc and timeoutfail", ds)
	}

	// A second open with nothing changed reuses the last analysis (after
	// a go list), and publishes the same.
	from = c.mark()
	c.notify("textDocument/didClose", map[string]any{"textDocument": map[string]any{"uri": fileURI(clean)}})
	c.open(clean)
	if ds := c.diagnostics(from, shop); len(ds) != 2 {
		t.Errorf("shop.go after reopening clean.go: %+v", ds)
	}
	// The log is copied from the server's stderr apart from its stdout.
	// Under load (bench/ciload.sh, load 20) the line came more than 5 s
	// after shop.go's diagnostics (that analysis took 5.8 s): it is waited
	// for as long as any answer of the server's (lspClient.wait).
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline) && !strings.Contains(c.stderr.String(), "inputs unchanged"); {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(c.stderr.String(), "inputs unchanged") {
		t.Errorf("reopening a file analyzed again with no input changed; log:\n%s", c.stderr.String())
	}

	// A file outside any module gets a note, not silence.
	from = c.mark()
	c.open(filepath.Join(outside, "loose.go"))
	if ds := c.diagnostics(from, filepath.Join(outside, "loose.go")); len(ds) != 1 || !strings.Contains(ds[0].Message, "no Go module") {
		t.Errorf("loose.go: got %+v, want a note that it is in no module", ds)
	}

	// The suppress action, applied and saved, silences txrpc.
	r := c.call("textDocument/codeAction", map[string]any{
		"textDocument": map[string]any{"uri": fileURI(shop)},
		"range":        tx.Range,
		"context":      map[string]any{"diagnostics": []any{}},
	})
	var actions []struct {
		Title string
		Edit  struct {
			Changes map[string][]struct {
				Range   diagRange
				NewText string
			}
		}
	}
	if err := json.Unmarshal(r.Result, &actions); err != nil || len(actions) == 0 {
		t.Fatalf("code actions: %s %v", r.Result, err)
	}
	var titles []string
	for _, a := range actions {
		titles = append(titles, a.Title)
	}
	if titles[0] != "suppress with //idemlint:ignore txrpc" {
		t.Fatalf("code actions %q: want the suppress action for txrpc first", titles)
	}
	e := actions[0].Edit.Changes[fileURI(shop)]
	if len(e) != 1 || e[0].Range.Start.Line != 18 || e[0].NewText != "\t//idemlint:ignore txrpc TODO: say why this is safe\n" {
		t.Fatalf("suppress edit %+v", e)
	}
	lines := strings.SplitAfter(bad, "\n")
	suppressed := strings.Join(lines[:18], "") + e[0].NewText + strings.Join(lines[18:], "")
	from = c.mark()
	writeInto(t, a, map[string]string{"shop/shop.go": suppressed})
	c.notify("textDocument/didSave", map[string]any{"textDocument": map[string]any{"uri": fileURI(shop)}})
	for _, d := range c.diagnostics(from, shop) {
		if d.Code == "txrpc" {
			t.Errorf("txrpc still reported after the suppress action: %+v", d)
		}
	}

	// A misspelled directive: the analyzers' suggested fix is offered.
	from = c.mark()
	writeInto(t, a, map[string]string{"shop/shop.go": strings.Replace(suppressed, "ignore txrpc", "ignore txrcp", 1)})
	c.notify("textDocument/didSave", map[string]any{"textDocument": map[string]any{"uri": fileURI(shop)}})
	var typo lspDiag
	for _, d := range c.diagnostics(from, shop) {
		if strings.Contains(d.Message, "names no rule") {
			typo = d
		}
	}
	if typo.Code == "" {
		t.Fatal("no diagnostic for the misspelled directive")
	}
	r = c.call("textDocument/codeAction", map[string]any{"textDocument": map[string]any{"uri": fileURI(shop)}, "range": typo.Range, "context": map[string]any{"diagnostics": []any{}}})
	if !strings.Contains(string(r.Result), "Replace txrcp with txrpc") {
		t.Errorf("code actions for the misspelled directive: %s, want its suggested fix", r.Result)
	}

	// The fix, saved: the findings are gone (an empty list).
	from = c.mark()
	writeInto(t, a, map[string]string{"shop/shop.go": good})
	c.notify("textDocument/didSave", map[string]any{"textDocument": map[string]any{"uri": fileURI(shop)}})
	if ds := c.diagnostics(from, shop); len(ds) != 0 {
		t.Errorf("after the fix: %+v, want an empty list", ds)
	}

	// A file created and then deleted on disk (git checkout), seen through
	// didChangeWatchedFiles: its finding appears, then is cleared.
	extra := filepath.Join(a, "shop/extra.go")
	from = c.mark()
	writeInto(t, a, map[string]string{"shop/extra.go": strings.Replace(strings.Replace(bad, "func Charge", "func Charge2", 1), "func notify", "func notify2", 1)})
	c.notify("workspace/didChangeWatchedFiles", map[string]any{"changes": []map[string]any{{"uri": fileURI(extra), "type": 1}}})
	if ds := c.diagnostics(from, extra); len(ds) == 0 {
		t.Errorf("extra.go created: no finding published")
	}
	from = c.mark()
	os.Remove(extra)
	c.notify("workspace/didChangeWatchedFiles", map[string]any{"changes": []map[string]any{{"uri": fileURI(extra), "type": 3}}})
	if ds := c.diagnostics(from, extra); len(ds) != 0 {
		t.Errorf("extra.go deleted: got %+v, want an empty list", ds)
	}

	// go.mod broken mid-session: one error on go.mod; repaired: back.
	from = c.mark()
	writeInto(t, a, map[string]string{"go.mod": "module example.com/shop\n\ngo 1.26\nrequire (\n"})
	c.notify("workspace/didChangeWatchedFiles", map[string]any{"changes": []map[string]any{{"uri": fileURI(filepath.Join(a, "go.mod")), "type": 2}}})
	if ds := c.diagnostics(from, filepath.Join(a, "go.mod")); len(ds) != 1 || ds[0].Severity != 1 {
		t.Errorf("broken go.mod: got %+v, want one error", ds)
	}
	from = c.mark()
	writeInto(t, a, map[string]string{"go.mod": "module example.com/shop\n\ngo 1.26\n"})
	c.notify("workspace/didChangeWatchedFiles", map[string]any{"changes": []map[string]any{{"uri": fileURI(filepath.Join(a, "go.mod")), "type": 2}}})
	if ds := c.diagnostics(from, filepath.Join(a, "go.mod")); len(ds) != 0 {
		t.Errorf("repaired go.mod: got %+v, want an empty list", ds)
	}
	c.shutdown()
}

// TestLSPExitKillsAnalysis closes stdin while an analysis runs: the server
// exits and no process it started is left (go list runs in the module's
// directory).
func TestLSPExitKillsAnalysis(t *testing.T) {
	a := t.TempDir()
	writeInto(t, a, map[string]string{"go.mod": "module example.com/shop\n\ngo 1.26\n", "shop/shop.go": bad})
	c := startLSP(t, t.TempDir())
	c.initialize(a)
	c.open(filepath.Join(a, "shop/shop.go"))
	deadline := time.Now().Add(30 * time.Second)
	for len(processesIn(a)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(processesIn(a)) == 0 {
		t.Fatal("no analysis process seen in the module")
	}
	c.stdin.Close()
	c.waitExit(1)
	time.Sleep(200 * time.Millisecond)
	if ps := processesIn(a); len(ps) > 0 {
		t.Errorf("processes left in %s after exit: %v", a, ps)
	}
}

// processesIn lists the processes whose working directory is dir.
func processesIn(dir string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
			cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return out
}

// TestLSPMatchesCLI opens every Go file of a module and checks that the
// (file, line, rule) set published equals `idemlint -json ./...`'s there.
func TestLSPMatchesCLI(t *testing.T) {
	for _, tt := range []struct{ name, dir string }{
		{"analyzer/testdata/mod", modtest.Dir(t)},
		{"examples/adopt", filepath.Join("..", "..", "examples", "adopt")},
		{"analyzer/testdata/locks", filepath.Join("..", "..", "analyzer", "testdata", "locks")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := filepath.Abs(tt.dir)
			if err != nil {
				t.Fatal(err)
			}
			cli := cliFindings(t, dir)
			if len(cli) == 0 {
				t.Fatal("the CLI found nothing: the comparison would be empty")
			}
			c := startLSP(t, t.TempDir())
			c.initialize(dir)
			var files []string
			filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") {
					files = append(files, path)
				}
				return err
			})
			for _, f := range files {
				c.open(f)
			}
			// A code action answers once the analysis is done.
			c.call("textDocument/codeAction", map[string]any{"textDocument": map[string]any{"uri": fileURI(files[0])}, "range": map[string]any{"start": map[string]int{}, "end": map[string]int{}}, "context": map[string]any{"diagnostics": []any{}}})
			last := map[string][]lspDiag{}
			c.mu.Lock()
			for _, m := range c.msgs {
				var p publishParams
				if m.Method == "textDocument/publishDiagnostics" && json.Unmarshal(m.Params, &p) == nil {
					last[p.URI] = p.Diagnostics
				}
			}
			c.mu.Unlock()
			got := map[string]bool{}
			for _, f := range files {
				ds, ok := last[fileURI(f)]
				if !ok {
					t.Errorf("%s: nothing published", f)
				}
				for _, d := range ds {
					if d.Code != "load" {
						got[fmt.Sprintf("%s:%d %s", f, d.Range.Start.Line+1, d.Code)] = true
					}
				}
			}
			if diff := setDiff(cli, got); diff != "" {
				t.Errorf("the server's findings differ from the CLI's (- CLI only, + server only):\n%s", diff)
			}
			t.Logf("%d findings in %d files, equal", len(cli), len(files))
			c.shutdown()
		})
	}
}

// lintedJSON holds `idemlint -json ./...`'s output by directory: each
// directory is linted once per test process. TestCorpus scores the
// corpus's packages in analyzer/testdata/mod's run and TestLSPMatchesCLI
// compares the server with the same run (a run there type-checks the real
// libraries: about 7 s of CPU, which the two tests spent each before).
var lintedJSON struct {
	mu   sync.Mutex
	runs map[string]*lintRun
}

type lintRun struct {
	once   sync.Once
	stdout string
	err    error
}

// lintJSON returns `idemlint -json ./...`'s standard output in dir (an
// absolute path), running it on the first call for dir; the run must
// exit 0.
func lintJSON(t *testing.T, dir string) string {
	t.Helper()
	bin := idemlintBinary(t)
	lintedJSON.mu.Lock()
	if lintedJSON.runs == nil {
		lintedJSON.runs = map[string]*lintRun{}
	}
	r := lintedJSON.runs[dir]
	if r == nil {
		r = &lintRun{}
		lintedJSON.runs[dir] = r
	}
	lintedJSON.mu.Unlock()
	r.once.Do(func() {
		cmd := exec.Command(bin, "-json", "./...")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+testenv.ChildGoFlags())
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		r.stdout = string(out)
		if err != nil {
			r.err = fmt.Errorf("idemlint -json ./... in %s: %w\n%s", dir, err, stderr.String())
		}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.stdout
}

// cliFindings is `idemlint -json ./...` in dir (see lintJSON): the set of
// "file:line rule".
func cliFindings(t *testing.T, dir string) map[string]bool {
	t.Helper()
	var tree map[string]map[string][]struct{ Posn string }
	if err := json.Unmarshal([]byte(lintJSON(t, dir)), &tree); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, rules := range tree {
		for rule, ds := range rules {
			for _, d := range ds {
				// file:line:col, the file relative to dir.
				p := d.Posn
				p = p[:strings.LastIndexByte(p, ':')]
				i := strings.LastIndexByte(p, ':')
				file := p[:i]
				if !filepath.IsAbs(file) {
					file = filepath.Join(dir, file)
				}
				set[fmt.Sprintf("%s:%s %s", file, p[i+1:], rule)] = true
			}
		}
	}
	return set
}

func setDiff(want, got map[string]bool) string {
	var out []string
	for k := range want {
		if !got[k] {
			out = append(out, "- "+k)
		}
	}
	for k := range got {
		if !want[k] {
			out = append(out, "+ "+k)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestLSPConfig: initializationOptions add to .idemlint.json, which is
// read again when it changes; a bad one is an error at the file.
func TestLSPConfig(t *testing.T) {
	a := t.TempDir()
	writeInto(t, a, map[string]string{"go.mod": "module example.com/shop\n\ngo 1.26\n", "shop/shop.go": bad})
	shop, config := filepath.Join(a, "shop/shop.go"), filepath.Join(a, ".idemlint.json")
	codes := func(ds []lspDiag) string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Code)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	c := startLSP(t, t.TempDir())
	r := c.call("initialize", map[string]any{
		"processId": nil, "rootUri": fileURI(a), "capabilities": map[string]any{},
		"initializationOptions": map[string]any{"disable": []string{"timeoutfail"}},
	})
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	c.notify("initialized", map[string]any{})
	from := c.mark()
	c.open(shop)
	if got := codes(c.diagnostics(from, shop)); got != "txrpc" {
		t.Errorf("timeoutfail disabled by initializationOptions: got %q, want txrpc", got)
	}
	changed := func(path string) {
		c.notify("workspace/didChangeWatchedFiles", map[string]any{"changes": []map[string]any{{"uri": fileURI(path), "type": 2}}})
	}
	from = c.mark()
	writeInto(t, a, map[string]string{".idemlint.json": `{"disable": ["txrpc"]}`})
	changed(config)
	if got := codes(c.diagnostics(from, shop)); got != "" {
		t.Errorf("txrpc disabled by .idemlint.json too: got %q, want nothing", got)
	}
	from = c.mark()
	writeInto(t, a, map[string]string{".idemlint.json": `{"disabled": ["txrpc"]}`})
	changed(config)
	if ds := c.diagnostics(from, config); len(ds) != 1 || !strings.Contains(ds[0].Message, `unknown field "disabled"`) {
		t.Errorf("bad .idemlint.json: got %+v, want one error naming the field", ds)
	}
	c.diagnostics(from, shop) // the same run's
	from = c.mark()
	os.Remove(config)
	c.notify("workspace/didChangeWatchedFiles", map[string]any{"changes": []map[string]any{{"uri": fileURI(config), "type": 3}}})
	if got := codes(c.diagnostics(from, shop)); got != "txrpc" {
		t.Errorf(".idemlint.json deleted: got %q, want txrpc", got)
	}
	if ds := c.diagnostics(from, config); len(ds) != 0 {
		t.Errorf(".idemlint.json deleted: its error is still shown: %+v", ds)
	}
	c.shutdown()
}

// TestLSPHelp: `idemlint -help` names the subcommand, `idemlint lsp -help`
// documents it, and stray arguments are refused.
func TestLSPHelp(t *testing.T) {
	bin := idemlintBinary(t)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-help"}, 0, "idemlint lsp"},
		{[]string{"lsp", "-help"}, 0, "initializationOptions"},
		{[]string{"lsp", "extra"}, 1, "unexpected arguments"},
	} {
		cmd := exec.Command(bin, tt.args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tt.code || !strings.Contains(string(out), tt.want) {
			t.Errorf("idemlint %v: exit %d, output:\n%s\nwant exit %d and %q", tt.args, code, out, tt.code, tt.want)
		}
	}
}
