package lsp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// ErrNoShutdown is returned by [Serve] when the client exited (or closed
// the stream) without a shutdown request: the command exits with status 1,
// as the LSP asks.
var ErrNoShutdown = errors.New("exit without shutdown")

// Server states.
const (
	stateNew = iota
	stateRunning
	stateShutdown
)

type server struct {
	cfg Config
	out *writer
	log io.Writer

	ctx    context.Context // cancelled when the server stops
	cancel context.CancelFunc
	wg     sync.WaitGroup // analyses and request handlers

	// gate lets one analysis run at a time: each loads a whole module.
	gate chan struct{}

	mu        sync.Mutex
	state     int
	utf8      bool // positions count bytes, not UTF-16 units
	options   json.RawMessage
	folders   []string
	watch     bool               // the client registers file watchers dynamically
	open      map[string]bool    // open files, by absolute path
	modules   map[string]*module // by root directory
	published map[string]string  // files with diagnostics shown -> module root
	inflight  map[string]context.CancelFunc
	nextID    int
	// uris are the URIs the client named files with, by path: the server
	// answers in the client's spelling (a Windows client may write the
	// drive "c%3A" or "C:"; some compare URIs as strings).
	uris map[string]string
}

// remember records the URI the client names path with.
func (s *server) remember(path, uri string) {
	s.mu.Lock()
	s.uris[path] = uri
	s.mu.Unlock()
}

// uriOf is the URI of path: the client's own spelling when it named the
// file, else pathToURI's.
func (s *server) uriOf(path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if uri, ok := s.uris[path]; ok {
		return uri
	}
	return pathToURI(path)
}

// module is the analysis state of one module.
type module struct {
	dir     string
	timer   *time.Timer
	dirty   bool // an event came after the last analysis started
	running bool
	idle    chan struct{} // closed when neither dirty nor running
	report  *Report
	err     error
}

// Serve runs the server on in and out until the client sends exit or in
// ends. It returns nil after shutdown and exit, ErrNoShutdown otherwise.
// Analyses still running are stopped (their go list process killed)
// before it returns.
func Serve(ctx context.Context, in io.Reader, out io.Writer, cfg Config) error {
	if cfg.Debounce == 0 {
		cfg.Debounce = 200 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Headline == nil {
		cfg.Headline = func(string) string { return "" }
	}
	if cfg.DocURL == nil {
		cfg.DocURL = func(string) string { return "" }
	}
	s := &server{
		cfg:       cfg,
		out:       &writer{w: out},
		log:       cfg.Log,
		gate:      make(chan struct{}, 1),
		open:      map[string]bool{},
		modules:   map[string]*module{},
		published: map[string]string{},
		inflight:  map[string]context.CancelFunc{},
		uris:      map[string]string{},
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	defer s.stop()
	r := newReader(in)
	for {
		body, err := r.read()
		var ferr *framingError
		switch {
		case errors.As(err, &ferr):
			s.replyError(json.RawMessage("null"), codeParseError, ferr.msg)
			continue
		case err != nil:
			// The client closed the stream (or it broke): exit with it.
			if err != io.EOF {
				fmt.Fprintf(s.log, "idemlint lsp: reading: %v\n", err)
			}
			if s.getState() == stateShutdown {
				return nil
			}
			return ErrNoShutdown
		}
		if done, err := s.handle(body); done {
			return err
		}
	}
}

// stop cancels what runs and waits for it (briefly: an analysis past go
// list stops at its next package).
func (s *server) stop() {
	s.cancel()
	s.mu.Lock()
	for _, m := range s.modules {
		if m.timer != nil {
			m.timer.Stop()
		}
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

func (s *server) getState() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// handle dispatches one message. done reports that the server must stop.
func (s *server) handle(body []byte) (done bool, err error) {
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		s.replyError(json.RawMessage("null"), codeInvalidRequest, "not a JSON-RPC message object: "+err.Error())
		return false, nil
	}
	isRequest := len(m.ID) > 0 && string(m.ID) != "null"
	switch {
	case m.JSONRPC != "2.0":
		if isRequest || m.Method == "" {
			s.replyError(idOrNull(m.ID), codeInvalidRequest, `"jsonrpc" must be "2.0"`)
		}
		return false, nil
	case m.Method == "" && isRequest:
		return false, nil // a response to one of our requests
	case m.Method == "":
		s.replyError(json.RawMessage("null"), codeInvalidRequest, "a message with neither method nor id")
		return false, nil
	}
	state := s.getState()
	if m.Method == "exit" {
		if state == stateShutdown {
			return true, nil
		}
		return true, ErrNoShutdown
	}
	if !isRequest {
		if state == stateRunning {
			s.notify(m.Method, m.Params)
		}
		return false, nil // before initialize, notifications are dropped
	}
	switch {
	case state == stateNew && m.Method != "initialize":
		s.replyError(m.ID, codeServerNotInitialized, m.Method+" before initialize")
		return false, nil
	case state == stateShutdown:
		s.replyError(m.ID, codeInvalidRequest, m.Method+" after shutdown")
		return false, nil
	}
	switch m.Method {
	case "initialize":
		if state != stateNew {
			s.replyError(m.ID, codeInvalidRequest, "initialize sent twice")
			return false, nil
		}
		res, rerr := s.initialize(m.Params)
		s.answer(m.ID, res, rerr)
	case "shutdown":
		s.mu.Lock()
		s.state = stateShutdown
		s.mu.Unlock()
		s.cancel() // stop analyses; exit follows
		s.answer(m.ID, nil, nil)
	case "textDocument/codeAction":
		s.async(m, func(ctx context.Context) (any, *rpcError) { return s.codeAction(ctx, m.Params) })
	default:
		s.replyError(m.ID, codeMethodNotFound, "method not found: "+m.Method)
	}
	return false, nil
}

// async answers a request from its own goroutine, so that $/cancelRequest
// can reach it.
func (s *server) async(m message, f func(context.Context) (any, *rpcError)) {
	ctx, cancel := context.WithCancel(s.ctx)
	key := string(m.ID)
	s.mu.Lock()
	s.inflight[key] = cancel
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.inflight, key)
			s.mu.Unlock()
			cancel()
		}()
		res, rerr := f(ctx)
		if ctx.Err() != nil && rerr == nil && s.ctx.Err() == nil {
			rerr = &rpcError{codeRequestCancelled, "request cancelled"}
		}
		if ctx.Err() != nil && rerr == nil {
			rerr = &rpcError{codeRequestCancelled, "server shutting down"}
		}
		s.answer(m.ID, res, rerr)
	}()
}

func (s *server) answer(id json.RawMessage, res any, rerr *rpcError) {
	if rerr != nil {
		s.replyError(id, rerr.Code, rerr.Message)
		return
	}
	s.send(response{JSONRPC: "2.0", ID: id, Result: res})
}

func (s *server) replyError(id json.RawMessage, code int, msg string) {
	s.send(errorResponse{JSONRPC: "2.0", ID: id, Error: &rpcError{code, msg}})
}

func (s *server) send(v any) {
	if err := s.out.write(v); err != nil {
		fmt.Fprintf(s.log, "idemlint lsp: writing: %v\n", err)
	}
}

func (s *server) sendNotification(method string, params any) {
	s.send(notification{JSONRPC: "2.0", Method: method, Params: params})
}

func idOrNull(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return json.RawMessage("null")
	}
	return id
}

func (s *server) initialize(raw json.RawMessage) (any, *rpcError) {
	var p initializeParams
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, &rpcError{codeInvalidParams, "initialize: " + err.Error()}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, enc := range p.Capabilities.General.PositionEncodings {
		if enc == "utf-8" {
			s.utf8 = true
		}
	}
	if len(p.InitializationOptions) > 0 && string(p.InitializationOptions) != "null" {
		s.options = p.InitializationOptions
	}
	for _, f := range p.WorkspaceFolders {
		if dir, err := uriToPath(f.URI); err == nil {
			s.folders = append(s.folders, dir)
		}
	}
	if len(s.folders) == 0 && p.RootURI != "" {
		if dir, err := uriToPath(p.RootURI); err == nil {
			s.folders = append(s.folders, dir)
		}
	}
	s.watch = p.Capabilities.Workspace.DidChangeWatchedFiles.DynamicRegistration
	s.state = stateRunning
	enc := "utf-16"
	if s.utf8 {
		enc = "utf-8"
	}
	res := initializeResult{
		Capabilities: serverCapabilities{
			PositionEncoding:   enc,
			TextDocumentSync:   textDocumentSync{OpenClose: true, Change: 2, Save: saveOptions{}},
			CodeActionProvider: codeActionOptions{CodeActionKinds: []string{"quickfix"}},
		},
		ServerInfo: serverInfo{Name: "idemlint", Version: s.cfg.Version},
	}
	res.Capabilities.Workspace.WorkspaceFolders.Supported = true
	res.Capabilities.Workspace.WorkspaceFolders.ChangeNotifications = true
	return res, nil
}

// notify handles a notification of the running server. Malformed
// parameters are logged: a notification has no answer.
func (s *server) notify(method string, raw json.RawMessage) {
	bad := func(err error) {
		fmt.Fprintf(s.log, "idemlint lsp: %s: invalid params: %v\n", method, err)
		s.sendNotification("window/logMessage", showMessageParams{Type: 1, Message: "idemlint: " + method + ": invalid params: " + err.Error()})
	}
	switch method {
	case "initialized":
		s.mu.Lock()
		watch := s.watch
		s.nextID++
		id := s.nextID
		s.mu.Unlock()
		if watch {
			var ws []fileSystemWatcher
			for _, g := range []string{"**/*.go", "**/go.mod", "**/go.sum", "**/go.work", "**/" + configFile} {
				ws = append(ws, fileSystemWatcher{GlobPattern: g})
			}
			s.send(request{JSONRPC: "2.0", ID: id, Method: "client/registerCapability", Params: registrationParams{
				Registrations: []registration{{ID: "idemlint-watch", Method: "workspace/didChangeWatchedFiles", RegisterOptions: map[string]any{"watchers": ws}}},
			}})
		}
	case "textDocument/didOpen", "textDocument/didSave", "textDocument/didClose":
		var p documentParams
		if err := json.Unmarshal(raw, &p); err != nil {
			bad(err)
			return
		}
		path, err := uriToPath(p.TextDocument.URI)
		if err != nil {
			bad(err)
			return
		}
		s.remember(path, p.TextDocument.URI)
		switch method {
		case "textDocument/didOpen":
			s.mu.Lock()
			s.open[path] = true
			s.mu.Unlock()
			s.touch(path, p.TextDocument.URI)
		case "textDocument/didSave":
			s.touch(path, p.TextDocument.URI)
		case "textDocument/didClose":
			s.mu.Lock()
			delete(s.open, path)
			m := s.modules[s.rootOf(path)]
			s.mu.Unlock()
			if m != nil {
				s.publish(m)
			}
		}
	case "textDocument/didChange":
		// Analysis reads the files on disk: it runs on save.
	case "workspace/didChangeWatchedFiles":
		var p didChangeWatchedFilesParams
		if err := json.Unmarshal(raw, &p); err != nil {
			bad(err)
			return
		}
		for _, c := range p.Changes {
			path, err := uriToPath(c.URI)
			if err != nil {
				bad(err)
				continue
			}
			s.changed(path)
		}
	case "workspace/didChangeWorkspaceFolders":
		var p didChangeWorkspaceFoldersParams
		if err := json.Unmarshal(raw, &p); err != nil {
			bad(err)
			return
		}
		s.mu.Lock()
		for _, f := range p.Event.Added {
			if dir, err := uriToPath(f.URI); err == nil {
				s.folders = append(s.folders, dir)
			}
		}
		s.mu.Unlock()
	case "$/cancelRequest":
		var p cancelParams
		if err := json.Unmarshal(raw, &p); err != nil {
			bad(err)
			return
		}
		s.mu.Lock()
		cancel := s.inflight[string(p.ID)]
		s.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}
}

const configFile = ".idemlint.json"

// touch schedules the analysis of the module holding path, a file opened
// or saved, or says that it is in none.
func (s *server) touch(path, uri string) {
	s.mu.Lock()
	root := s.rootOf(path)
	s.mu.Unlock()
	if root == "" {
		s.sendNotification("textDocument/publishDiagnostics", publishDiagnosticsParams{URI: uri, Diagnostics: []diagnostic{{
			Severity: severityInformation,
			Source:   "idemlint",
			Message:  "idemlint: not analyzed: this file is in no Go module (no go.mod in its directory or above it)",
		}}})
		return
	}
	s.schedule(root)
}

// changed handles a file changed on disk: a Go file or a module's go.mod,
// go.sum or config reanalyzes its module; go.work reanalyzes every module
// below it.
func (s *server) changed(path string) {
	base := filepath.Base(path)
	switch {
	case base == "go.work" || base == "go.work.sum":
		s.mu.Lock()
		var roots []string
		for dir := range s.modules {
			if within(dir, filepath.Dir(path)) {
				roots = append(roots, dir)
			}
		}
		s.mu.Unlock()
		for _, r := range roots {
			s.schedule(r)
		}
	case strings.HasSuffix(base, ".go"), base == "go.mod", base == "go.sum", base == configFile:
		// Every analyzed root the file belongs to: a module's root and
		// a workspace folder below it are analyzed apart.
		s.mu.Lock()
		var roots []string
		for dir := range s.modules {
			if within(path, dir) {
				roots = append(roots, dir)
			}
		}
		s.mu.Unlock()
		for _, r := range roots {
			s.schedule(r)
		}
	}
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// rootOf returns the directory an open file is analyzed from, as
// 'idemlint ./...' run there: the innermost of its module's root and the
// workspace folder holding it, "" when it is in no module. s.mu is held.
func (s *server) rootOf(path string) string {
	root := moduleRoot(path)
	if root == "" {
		return ""
	}
	for _, f := range s.folders {
		if within(path, f) && within(f, root) && len(f) > len(root) {
			root = f
		}
	}
	return root
}

// goMod is the go.mod of the module holding dir (dir's own when there is
// none any more).
func goMod(dir string) string {
	if root := moduleRoot(filepath.Join(dir, "go.mod")); root != "" {
		return filepath.Join(root, "go.mod")
	}
	return filepath.Join(dir, "go.mod")
}

// moduleRoot returns the directory of the go.mod at or above path's
// directory, or "".
func moduleRoot(path string) string {
	dir := filepath.Dir(path)
	for {
		if st, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !st.IsDir() {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

// schedule (re)starts the module's debounce timer.
func (s *server) schedule(root string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateRunning {
		return
	}
	m := s.modules[root]
	if m == nil {
		m = &module{dir: root, idle: make(chan struct{})}
		s.modules[root] = m
	} else if !m.dirty && !m.running {
		m.idle = make(chan struct{})
	}
	m.dirty = true
	if m.timer == nil {
		m.timer = time.AfterFunc(s.cfg.Debounce, func() { s.run(m) })
	} else {
		m.timer.Reset(s.cfg.Debounce)
	}
}

// run analyzes m until no event came during its last analysis, publishing
// after each.
func (s *server) run(m *module) {
	s.mu.Lock()
	if m.running || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	m.running = true
	opts := s.options
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	for {
		s.mu.Lock()
		if !m.dirty || s.ctx.Err() != nil {
			m.running = false
			m.dirty = false
			close(m.idle)
			s.mu.Unlock()
			return
		}
		m.dirty = false
		s.mu.Unlock()

		select {
		case s.gate <- struct{}{}:
		case <-s.ctx.Done():
			continue
		}
		t0 := time.Now()
		rep, err := s.cfg.Lint(s.ctx, m.dir, opts)
		<-s.gate
		if s.ctx.Err() != nil {
			continue
		}
		if err != nil {
			fmt.Fprintf(s.log, "idemlint lsp: %s: %v\n", m.dir, err)
		} else {
			reused := ""
			if rep.Reused {
				reused = " (inputs unchanged: the last analysis reused)"
			}
			fmt.Fprintf(s.log, "idemlint lsp: %s: %d findings, %d load errors in %v%s\n", m.dir, len(rep.Findings), len(rep.Errors), time.Since(t0).Round(time.Millisecond), reused)
		}
		s.mu.Lock()
		m.report, m.err = rep, err
		s.mu.Unlock()
		s.publish(m)
	}
}

// publish sends the diagnostics of m's last analysis for the files of the
// packages with an open file, the load errors wherever they are, and an
// empty list for each file whose diagnostics are gone.
func (s *server) publish(m *module) {
	s.mu.Lock()
	rep, lerr := m.report, m.err
	visible := map[string]bool{} // package directories with an open file
	var openFiles []string
	for path := range s.open {
		if s.rootOf(path) == m.dir {
			visible[filepath.Dir(path)] = true
			openFiles = append(openFiles, path)
		}
	}
	before := map[string]bool{}
	for path, root := range s.published {
		if root == m.dir {
			before[path] = true
		}
	}
	utf8 := s.utf8
	s.mu.Unlock()

	conv := newConverter(utf8)
	byFile := map[string][]diagnostic{}
	for _, f := range openFiles {
		byFile[f] = []diagnostic{}
	}
	switch {
	case lerr != nil:
		gomod := goMod(m.dir)
		byFile[gomod] = append(byFile[gomod], loadDiagnostic(conv, LoadError{Span: goModSpan(lerr.Error(), gomod), Message: lerr.Error()}))
	case rep != nil:
		for _, f := range rep.Findings {
			if !visible[filepath.Dir(f.Span.File)] {
				continue
			}
			byFile[f.Span.File] = append(byFile[f.Span.File], s.findingDiagnostic(conv, f))
		}
		errDirs := map[string]bool{}
		for _, e := range rep.Errors {
			if e.Span.File == "" {
				e.Span.File = goMod(m.dir)
			}
			errDirs[filepath.Dir(e.Span.File)] = true
			byFile[e.Span.File] = append(byFile[e.Span.File], loadDiagnostic(conv, e))
		}
		for _, dir := range rep.NotAnalyzed {
			if errDirs[dir] {
				continue // the load error is in the package itself
			}
			for _, f := range openFiles {
				if filepath.Dir(f) == dir {
					byFile[f] = append(byFile[f], diagnostic{
						Severity: severityInformation,
						Source:   "idemlint",
						Message:  "idemlint: this package was not analyzed: it or one of its imports did not load (see the load error)",
					})
				}
			}
		}
	}
	for path := range before {
		if _, ok := byFile[path]; !ok {
			byFile[path] = []diagnostic{}
		}
	}
	paths := make([]string, 0, len(byFile))
	for p := range byFile {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	s.mu.Lock()
	for _, p := range paths {
		if len(byFile[p]) > 0 {
			s.published[p] = m.dir
		} else {
			delete(s.published, p)
		}
	}
	s.mu.Unlock()
	for _, p := range paths {
		s.sendNotification("textDocument/publishDiagnostics", publishDiagnosticsParams{URI: s.uriOf(p), Diagnostics: byFile[p]})
	}
}

// findingDiagnostic is the LSP diagnostic of a finding: a short first
// line (the rule's summary), then the whole message.
func (s *server) findingDiagnostic(conv *converter, f Finding) diagnostic {
	msg := f.Message
	if h := s.cfg.Headline(f.Rule); h != "" {
		msg = h + "\n" + msg
	}
	d := diagnostic{
		Range:    conv.lspRange(f.Span),
		Severity: severityWarning,
		Code:     f.Rule,
		Source:   "idemlint",
		Message:  msg,
	}
	if href := s.cfg.DocURL(f.Rule); href != "" {
		d.CodeDescription = &codeDescription{Href: href}
	}
	for _, r := range f.Related {
		d.RelatedInformation = append(d.RelatedInformation, relatedInformation{
			Location: location{URI: s.uriOf(r.Span.File), Range: conv.lspRange(r.Span)},
			Message:  r.Message,
		})
	}
	return d
}

func loadDiagnostic(conv *converter, e LoadError) diagnostic {
	return diagnostic{
		Range:    conv.lspRange(e.Span),
		Severity: severityError,
		Code:     "load",
		Source:   "idemlint",
		Message:  "idemlint: not analyzed: " + e.Message,
	}
}
