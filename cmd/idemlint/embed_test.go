package main_test

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
)

// embedded is a three-package module in the shape of a pocketbase
// service: core declares the App interface and BaseApp, its transaction
// runner; notify an interface with an HTTP implementation and decorators;
// app embeds both, by pointer and by value, struct and interface, at
// several depths.
var embedded = map[string]string{
	"go.mod": "module example.com/emb\n\ngo 1.26\n",
	"core/core.go": `package core

import (
	"context"
	"database/sql"
)

// App is what handlers see of the application.
type App interface {
	RunInTransaction(fn func(txApp App) error) error
	Save(ctx context.Context, id string) error
}

// BaseApp is the application: it runs fn in a database transaction.
type BaseApp struct{ DB *sql.DB }

func (a *BaseApp) RunInTransaction(fn func(txApp App) error) error {
	tx, err := a.DB.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(a); err != nil {
		return err
	}
	return tx.Commit()
}

func (a *BaseApp) Save(ctx context.Context, id string) error {
	_, err := a.DB.ExecContext(ctx, "UPDATE orders SET paid = true WHERE id = $1", id)
	return err
}
`,
	"notify/notify.go": `package notify

import (
	"context"
	"log"
	"net/http"
	"strings"
)

// Notifier tells a customer.
type Notifier interface {
	Notify(ctx context.Context, msg string) error
}

// HTTP posts to a webhook.
type HTTP struct{ URL string }

func (h *HTTP) Notify(ctx context.Context, msg string) error {
	resp, err := http.Post(h.URL, "text/plain", strings.NewReader(msg))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Logging logs, then calls the notifier it decorates.
type Logging struct{ Notifier }

func (l Logging) Notify(ctx context.Context, msg string) error {
	log.Printf("notify %q", msg)
	return l.Notifier.Notify(ctx, msg)
}

// Tagged embeds the HTTP notifier itself (by pointer): Notify is promoted.
type Tagged struct {
	*HTTP
	Tag string
}

// Counted embeds a decorator by value, two levels above HTTP.
type Counted struct {
	Tagged
	N int
}
`,
	"app/app.go": `package app

import (
	"context"

	"example.com/emb/core"
	"example.com/emb/notify"
)

// App embeds *core.BaseApp: RunInTransaction is promoted.
type App struct{ *core.BaseApp }

// Deep embeds App by value: promoted through two levels.
type Deep struct{ App }

// Wrapped embeds the core.App interface: it forwards to whatever it holds.
type Wrapped struct{ core.App }

type Service struct {
	App    core.App
	Notify notify.Notifier
}

func (s *Service) Pay(ctx context.Context, id string) error {
	return s.App.RunInTransaction(func(txApp core.App) error {
		if err := txApp.Save(ctx, id); err != nil {
			return err
		}
		return s.Notify.Notify(ctx, "paid "+id)
	})
}
`,
}

// TestEmbedded: an interface call inside a transaction runner reached
// through the core.App interface, whose implementations embed the runner's
// type (by pointer, by value, two levels deep, or as an interface), calls a
// Notifier whose implementations are an HTTP client, a decorator of the
// interface and types embedding the client. Before methods promoted through
// embedding resolved to the declaring type's summary, and decorators to what
// they forward to, the run was silent.
func TestEmbedded(t *testing.T) {
	bin := idemlintBinary(t)
	dir := writeFiles(t, embedded)
	diags := txrpcFindings(t, dir, bin, "./...")
	if len(diags) != 1 {
		t.Fatalf("txrpc findings = %d, want 1: %v", len(diags), diags)
	}
	for _, want := range []string{"(notify.Notifier).Notify (called at app.go:29:10)", "(*notify.HTTP).Notify -> http.Post", "transaction run by the call at app.go:25:9"} {
		if !strings.Contains(diags[0], want) {
			t.Errorf("message lacks %q: %s", want, diags[0])
		}
	}
}

// opaque adds implementations of notify.Notifier whose I/O the analysis
// cannot follow: a cgo binding, and a hand-off to a background worker over
// a channel.
var opaque = map[string]string{
	"notify/cnotify/cnotify.go": `package cnotify

/*
static int notify_c(const char *msg) { return 0; }
*/
import "C"

import "context"

// C calls a C library that talks to the network.
type C struct{}

func (C) Notify(ctx context.Context, msg string) error {
	cs := C.CString(msg)
	_ = cs
	C.notify_c(cs)
	return nil
}
`,
	"notify/queued/queued.go": `package queued

import "context"

// Queue hands the message to a worker started by a library.
type Queue struct{ ch chan string }

func (q *Queue) Notify(ctx context.Context, msg string) error {
	q.ch <- msg
	return nil
}
`,
}

// TestLoadingMoreKeepsFindings: a finding made on part of the program
// stays when implementations whose I/O is out of sight (cgo, a channel
// hand-off) are loaded too. Before, one such implementation silenced it.
func TestLoadingMoreKeepsFindings(t *testing.T) {
	bin := idemlintBinary(t)
	files := map[string]string{}
	for name, src := range embedded {
		files[name] = src
	}
	for name, src := range opaque {
		files[name] = src
	}
	dir := writeFiles(t, files)
	part := txrpcFindings(t, dir, bin, "./app", "./core", "./notify")
	whole := txrpcFindings(t, dir, bin, "./...")
	if len(part) != 1 {
		t.Fatalf("on part of the program: %d findings, want 1: %v", len(part), part)
	}
	for _, d := range part {
		found := false
		for _, w := range whole {
			found = found || w == d
		}
		if !found {
			t.Errorf("loading more of the program lost %s\nwhole program: %v", d, whole)
		}
	}
	// Only the opaque implementations: they may do I/O.
	files["notify/notify.go"] = `package notify

import "context"

type Notifier interface {
	Notify(ctx context.Context, msg string) error
}
`
	dir = writeFiles(t, files)
	only := txrpcFindings(t, dir, bin, "./...")
	if len(only) != 1 || !strings.Contains(only[0], "(cgo)") {
		t.Errorf("cgo and channel implementations only: %v, want 1 finding naming the cgo call", only)
	}
}

// txrpcFindings runs bin -json on patterns in dir and returns the
// messages of the txrpc findings in package app, sorted.
func txrpcFindings(t *testing.T, dir, bin string, patterns ...string) []string {
	t.Helper()
	stdout, stderr, code := run(t, dir, bin, append([]string{"-json"}, patterns...)...)
	if code != 0 {
		t.Fatalf("-json: exit %d\n%s", code, stderr)
	}
	var tree map[string]map[string][]struct {
		Posn    string `json:"posn"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(stdout), &tree); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	var out []string
	for pkg, rules := range tree {
		if !strings.HasSuffix(pkg, "/app") {
			continue
		}
		for _, d := range rules["txrpc"] {
			out = append(out, d.Posn+": "+d.Message)
		}
	}
	sort.Strings(out)
	return out
}

// beginHelpers: a transaction begun by an implementation of a repository
// interface (in a package the caller does not import) and by a helper of
// another package, then a network call, then Commit.
var beginHelpers = map[string]string{
	"go.mod": "module example.com/bh\n\ngo 1.26\n",
	"store/store.go": `package store

import (
	"context"
	"database/sql"
)

// Repo hands out transactions.
type Repo interface {
	GetTx(ctx context.Context) (*sql.Tx, error)
}

// Open begins a transaction for its caller.
func Open(ctx context.Context, db *sql.DB) (*sql.Tx, error) { return db.BeginTx(ctx, nil) }
`,
	"store/pg/pg.go": `package pg

import (
	"context"
	"database/sql"

	"example.com/bh/store"
)

type Repo struct{ DB *sql.DB }

func (r *Repo) GetTx(ctx context.Context) (*sql.Tx, error) {
	tx, err := store.Open(ctx, r.DB)
	if err != nil {
		return nil, err
	}
	return tx, nil
}
`,
	"app/app.go": `package app

import (
	"context"
	"net/http"

	"example.com/bh/store"
)

func Pay(ctx context.Context, repo store.Repo) error {
	tx, err := repo.GetTx(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := http.Post("https://pay.example/charge", "text/plain", nil); err != nil {
		return err
	}
	return tx.Commit()
}
`,
}

// TestBeginHelperInterface: repo.GetTx(ctx), resolved to the only
// implementation, which begins through a helper of another package, opens
// a transaction like db.BeginTx.
func TestBeginHelperInterface(t *testing.T) {
	bin := idemlintBinary(t)
	dir := writeFiles(t, beginHelpers)
	diags := txrpcFindings(t, dir, bin, "./...")
	if len(diags) != 1 || !strings.Contains(diags[0], "http.Post") || !strings.Contains(diags[0], "transaction begun at app.go:11:") {
		t.Fatalf("txrpc findings = %v, want 1: http.Post inside the transaction begun at app.go:11", diags)
	}
}
